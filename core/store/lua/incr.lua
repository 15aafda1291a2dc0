-- Counters: KEYS[1]; ARGV = ttl ms (0: keep the expiry), then field, delta pairs.
-- Returns the new values (as Redis prints them) in the order given.
local out = {}
for i = 2, #ARGV, 2 do out[#out + 1] = redis.call('HINCRBYFLOAT', KEYS[1], ARGV[i], ARGV[i + 1]) end
if tonumber(ARGV[1]) > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return out
