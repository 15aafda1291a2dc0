-- Compare-and-set of a string value. KEYS[1]; ARGV[1] = expected, ARGV[2] = '0' when the
-- key must be absent, ARGV[3] = next, ARGV[4] = 'del' to delete, ARGV[5] = ttl ms (0 for
-- none). Answers {1}, or {0, current} ({0} when absent) so the caller can retry without
-- another GET.
local cur = redis.call('GET', KEYS[1])
if ARGV[2] == '0' then
  if cur then return {0, cur} end
else
  if not cur then return {0} end
  if cur ~= ARGV[1] then return {0, cur} end
end
if ARGV[4] == 'del' then redis.call('DEL', KEYS[1])
elseif tonumber(ARGV[5]) > 0 then redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[5])
else redis.call('SET', KEYS[1], ARGV[3]) end
return {1}
