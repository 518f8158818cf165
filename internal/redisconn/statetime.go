package redisconn

// LuaNotBefore defines two Lua functions for scripts that write task
// states (the Redis backend's start, the Redis broker's carried start),
// so that an attempt is never recorded as started before its task was
// created, whichever clock wrote the creation time:
//
//	timeOrder(s): a string whose byte order is the order of the time s, a
//	  JSON string of RFC 3339 in UTC as encoding/json writes a UTC
//	  time.Time ("2006-01-02T15:04:05.999999999Z", the fraction optional
//	  and of any length up to 9 digits); nil for any other form
//	notBefore(t, earliest): t, or earliest when it is the later time (both
//	  JSON strings as above; t when either has another form)
const LuaNotBefore = `
local function timeOrder(s)
  local dt, frac = string.match(s, '^"(%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d)%.?(%d*)Z"$')
  if not dt or #frac > 9 then return nil end
  return dt .. frac .. string.rep('0', 9 - #frac)
end
local function notBefore(t, earliest)
  local a, b = timeOrder(t), timeOrder(earliest)
  if a and b and b > a then return earliest end
  return t
end
`
