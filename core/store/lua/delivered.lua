-- The notifier's delivery log (core/notifier/delivery-log.ts).
-- Delivered jobs' rows and sent marks in one step (one round trip for a batch, instead of
-- two per delivery). KEYS[1] = the log list, then the sent marks; ARGV[1] = the cap, then
-- per delivery: its row, its mark's index in KEYS (0: none, a test alert), its seq, the
-- mark's ttl. A mark only rises; its expiry is renewed.
for i = 2, #ARGV, 4 do
  redis.call('LPUSH', KEYS[1], ARGV[i])
  local m = tonumber(ARGV[i + 1])
  if m > 0 then
    local cur = tonumber(redis.call('GET', KEYS[m]) or '0') or 0
    if tonumber(ARGV[i + 2]) > cur then redis.call('SET', KEYS[m], ARGV[i + 2], 'PX', ARGV[i + 3])
    else redis.call('PEXPIRE', KEYS[m], ARGV[i + 3]) end
  end
end
redis.call('LTRIM', KEYS[1], 0, tonumber(ARGV[1]) - 1)
return 1
