-- POST a new contact per request; BENCH_IDEMPOTENCY=1 adds a unique Idempotency-Key, as clients are told to:
-- one counting up per thread, or with BENCH_IDEMPOTENCY=uuid a random UUID (version 4), as most clients make them.
dofile(os.getenv("BENCH_LUA_DIR") .. "/report.lua")

local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end

function init(args)
  n = 0
  prefix = (os.getenv("BENCH_RUN") or "run") .. "-" .. tid
  idempotency = os.getenv("BENCH_IDEMPOTENCY")
  math.randomseed(os.time() * 100 + tid)
end

local function uuid4()
  return string.format("%08x-%04x-4%03x-%04x-%06x%06x", math.random(0, 0xffffffff), math.random(0, 0xffff),
    math.random(0, 0xfff), math.random(0x8000, 0xbfff), math.random(0, 0xffffff), math.random(0, 0xffffff))
end

function request()
  n = n + 1
  local headers = { ["Content-Type"] = "application/json", ["Authorization"] = "Bearer " .. token }
  if idempotency == "1" then headers["Idempotency-Key"] = "import-" .. prefix .. "-" .. n end
  if idempotency == "uuid" then headers["Idempotency-Key"] = uuid4() end
  local body = string.format(
    '{"first_name":"Bench","last_name":"Writer %d","email":"bench-%s-%d@example.com","phone":"+44 20 7946 0000","tags":["bench"],"custom_fields":{"source":"wrk"}}',
    n, prefix, n)
  return wrk.format("POST", base, headers, body)
end
