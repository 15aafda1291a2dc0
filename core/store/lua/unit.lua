-- A unit of work's commit (core/unit.ts) in one step. ARGV: the input ids (count, ttl,
-- then key indexes): any that exists makes the unit a repeat, answered with which ones;
-- the reads (count, then per read: key index, how to check, the value: '1' the whole
-- value, '0' absent, '2' only the stamp of a stamped value (the value is the stamp), '3'
-- the value past its stamp, or the whole of an unstamped one): any that changed is a
-- conflict, answered with what the key holds now; then the writes in order (count, then
-- per write its op and key index and its arguments). Nothing is written unless
-- everything checks. An outbox write ('x') appends its entry to the outbox stream. The
-- reply: {1, {entry ids}}. scripts.ts fills in __STAMP_MARK__ and __STAMP_BYTES__ (a stamped
-- value's first two bytes and the stamp's length) when it reads this file.
local MARK = '__STAMP_MARK__'
local STAMP = __STAMP_BYTES__
local a = 1
local function nx() local v = ARGV[a]; a = a + 1; return v end
local ni = tonumber(nx())
local ttl = nx()
local ins = a
local seen = {2}
for i = 1, ni do
  if redis.call('EXISTS', KEYS[tonumber(ARGV[ins + i - 1])]) == 1 then seen[#seen + 1] = i end
end
if #seen > 1 then return seen end
a = a + ni
local nr = tonumber(nx())
local bad = {}
for i = 1, nr do
  local ki = tonumber(nx())
  local present = nx()
  local exp = nx()
  local ok, cur = true, false
  if present == '2' then
    -- a stamped value: its stamp names the write, so the stamp alone is compared
    if redis.call('GETRANGE', KEYS[ki], 0, #exp - 1) ~= exp then ok = false; cur = redis.call('GET', KEYS[ki]) end
  else
    cur = redis.call('GET', KEYS[ki])
    if present == '0' then ok = not cur
    elseif not cur then ok = false
    elseif present == '3' and string.sub(cur, 1, #MARK) == MARK then ok = string.sub(cur, STAMP + 1) == exp
    else ok = cur == exp end
  end
  if not ok then
    if cur then bad[#bad + 1] = ki; bad[#bad + 1] = 1; bad[#bad + 1] = cur
    else bad[#bad + 1] = ki; bad[#bad + 1] = 0; bad[#bad + 1] = '' end
  end
end
if #bad > 0 then return {0, bad} end
local ids = {}
local nw = tonumber(nx())
for i = 1, nw do
  local op = nx()
  local k = KEYS[tonumber(nx())]
  if op == 's' then
    local v = nx()
    local t = tonumber(nx())
    if t > 0 then redis.call('SET', k, v, 'PX', t) else redis.call('SET', k, v) end
  elseif op == 'd' then
    redis.call('DEL', k)
  elseif op == 'h' then
    local t = tonumber(nx())
    local n = tonumber(nx())
    for j = 1, n do redis.call('HINCRBYFLOAT', k, nx(), nx()) end
    if t > 0 then redis.call('PEXPIRE', k, t) end
  elseif op == 'z' then
    local sc = nx()
    redis.call('ZADD', k, 'GT', sc, nx())
  elseif op == 'l' then
    local v = nx()
    local cap = tonumber(nx())
    local t = tonumber(nx())
    redis.call('LPUSH', k, v)
    redis.call('LTRIM', k, 0, cap - 1)
    if t > 0 then redis.call('PEXPIRE', k, t) end
  elseif op == 'x' then
    ids[#ids + 1] = redis.call('XADD', k, '*', 'v', nx())
  end
end
for i = 1, ni do redis.call('SET', KEYS[tonumber(ARGV[ins + i - 1])], '1', 'PX', ttl) end
return {1, ids}
