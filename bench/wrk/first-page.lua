-- GET the first page of the contact list (default sort: created_at desc, 25 per page).
dofile(os.getenv("BENCH_LUA_DIR") .. "/report.lua")

function request()
  return wrk.format("GET", base, { ["Authorization"] = "Bearer " .. token })
end
