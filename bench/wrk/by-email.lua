-- GET the contact list filtered by the email of a random seeded contact.
dofile(os.getenv("BENCH_LUA_DIR") .. "/report.lua")

local seeded = tonumber(os.getenv("BENCH_SEEDED") or "100000")

function request()
  local path = base .. "?email=contact" .. math.random(1, seeded) .. "%40example.com"
  return wrk.format("GET", path, { ["Authorization"] = "Bearer " .. token })
end
