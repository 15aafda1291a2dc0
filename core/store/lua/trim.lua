-- Index trim: KEYS[1]; ARGV = keep, below. Pops the lowest members beyond `keep` that
-- score below `below`, atomically (two instances trimming at once forget each id once).
local n = redis.call('ZCARD', KEYS[1]) - tonumber(ARGV[1])
if n <= 0 then return {} end
local out = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[2], 'LIMIT', 0, n)
for i = 1, #out, 1000 do redis.call('ZREM', KEYS[1], unpack(out, i, math.min(i + 999, #out))) end
return out
