package redisconn

// LuaCancelled defines cancelled(raw) for scripts that write task states
// in the layout of States (the Redis backend's SetStates, the Redis
// broker's carried settle), so that a cancel is never overwritten
// (driver.Canceller):
//
//	cancelled(raw): whether raw, the value of a task's state key (GET's
//	  reply; false or nil: none), is a CANCELLED state. The state is Go's
//	  encoding of driver.TaskState, whose first fields are task_uuid,
//	  task_name and state: read with an anchored pattern, not decoded; a
//	  state of another layout (a UUID or name with escapes) that holds
//	  the word at all is decoded with cjson
const LuaCancelled = `
local function cancelled(raw)
  if type(raw) ~= 'string' then return false end
  local st = string.match(raw, '^{"task_uuid":"[^"\\]*","task_name":"[^"\\]*","state":"(%u*)"')
  if st then return st == 'CANCELLED' end
  if not string.find(raw, 'CANCELLED', 1, true) then return false end
  local ok, p = pcall(cjson.decode, raw)
  return ok and type(p) == 'table' and p.state == 'CANCELLED'
end
`
