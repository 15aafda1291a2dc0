-- The notifier gate: admitRule (core/store/admit.ts) in one step. KEYS = the marks hash, then the rate sets by severity rank
-- (0..n-1); ARGV = episode, seq, state, severity rank, now, quiet ms, mark ttl ms,
-- window ms, max, member. Returns {1, as} or {0, why, n}.
local ep, seq, state, sev, now = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local m = redis.call('HMGET', KEYS[1], 'ep', 'seq', 'as', 'sev', 'tat')
local told = m[1] and m[2] and tonumber(m[1]) == ep
if told and tonumber(m[2]) == seq then return {1, m[3] or state} end
if told and seq < tonumber(m[2]) then return {0, 'stale'} end
if state == 'resolve' then
  if not told or m[3] == 'resolve' then return {0, 'untold'} end
  redis.call('HSET', KEYS[1], 'seq', ARGV[2], 'as', 'resolve')
  redis.call('PEXPIRE', KEYS[1], ARGV[7])
  return {1, 'resolve'}
end
if told and m[3] ~= 'resolve' then
  local was = tonumber(m[4]) or sev
  redis.call('HSET', KEYS[1], 'seq', ARGV[2], 'as', state, 'sev', math.max(was, sev))
  redis.call('PEXPIRE', KEYS[1], ARGV[7])
  return {1, state}
end
if m[5] and now - tonumber(m[5]) < tonumber(ARGV[6]) and sev <= (tonumber(m[4]) or -1) then
  return {0, 'quiet', tonumber(m[5])}
end
local n = 0
for r = sev, #KEYS - 2 do
  redis.call('ZREMRANGEBYSCORE', KEYS[r + 2], '-inf', now - tonumber(ARGV[8]))
  n = n + redis.call('ZCARD', KEYS[r + 2])
end
if n >= tonumber(ARGV[9]) then return {0, 'rate', n} end
redis.call('ZADD', KEYS[sev + 2], ARGV[5], ARGV[10])
redis.call('PEXPIRE', KEYS[sev + 2], ARGV[8])
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'ep', ARGV[1], 'seq', ARGV[2], 'as', 'trigger', 'sev', ARGV[4], 'tat', ARGV[5])
redis.call('PEXPIRE', KEYS[1], ARGV[7])
return {1, 'trigger'}
