-- POST a new contact per request; BENCH_IDEMPOTENCY=1 adds a unique Idempotency-Key, as clients are told to.
dofile(os.getenv("BENCH_LUA_DIR") .. "/report.lua")

local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end

function init(args)
  n = 0
  prefix = (os.getenv("BENCH_RUN") or "run") .. "-" .. tid
  idempotency = os.getenv("BENCH_IDEMPOTENCY") == "1"
end

function request()
  n = n + 1
  local headers = { ["Content-Type"] = "application/json", ["Authorization"] = "Bearer " .. token }
  if idempotency then headers["Idempotency-Key"] = "import-" .. prefix .. "-" .. n end
  local body = string.format(
    '{"first_name":"Bench","last_name":"Writer %d","email":"bench-%s-%d@example.com","phone":"+44 20 7946 0000","tags":["bench"],"custom_fields":{"source":"wrk"}}',
    n, prefix, n)
  return wrk.format("POST", base, headers, body)
end
