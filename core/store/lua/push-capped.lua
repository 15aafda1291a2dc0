-- Capped list push: KEYS[1]; ARGV = value, cap, ttl ms (0: keep the expiry). A script,
-- not MULTI, so it joins the client's automatic pipeline (one socket write per tick).
redis.call('LPUSH', KEYS[1], ARGV[1])
redis.call('LTRIM', KEYS[1], 0, tonumber(ARGV[2]) - 1)
if tonumber(ARGV[3]) > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[3]) end
return 1
