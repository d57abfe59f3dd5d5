-- setup: ARGV after the header: step, the limits' digest, then the step's
-- arguments. Steps:
--   claim me          → {'install'} | {'match', epoch} | {'differ'}
--                       (me is the process's id: it joins procs; when no
--                       other process is in the namespace, what it holds is
--                       a finished run's and is cleared first)
--   leave me          → {'ok'}
--   install n (kind field value)*n: kind 'l' limits text, 'b' budget, 'p' proxy → {'ok'} | {'differ'}
--   seal fields seq id reset → {'ok', epoch} | {'incomplete'} | {'differ'}
--   dump              → the limits hash
local step, sum = ARGV[H + 1], ARGV[H + 2]
if step == 'dump' then return redis.call('HGETALL', K_limits) end
if step == 'leave' then
  redis.call('ZREM', K_procs, ARGV[H + 3])
  return {'ok'}
end
local live = redis.call('HGET', K_limits, '~sum')
if step == 'claim' then
  local now = nowUs()
  redis.call('ZREMRANGEBYSCORE', K_procs, '-inf', F(now))
  if live and redis.call('ZCARD', K_procs) == 0 then
    -- Nobody is in the namespace: its limits, health and leases are those
    -- of a run that is over (leases expire long before a process leaves
    -- procs). A new run starts afresh, with new limits if it likes.
    for i = 1, #KEYS do
      if KEYS[i] ~= K_procs then redis.call('DEL', KEYS[i]) end
    end
    live = nil
  end
  redis.call('ZADD', K_procs, F(now + 3 * ttl), ARGV[H + 3])
  if not live then
    redis.call('HSET', K_limits, '~sum', sum)
    return {'install'}
  end
  if live ~= sum then return {'differ'} end
  local eid = epoch()
  if eid and redis.call('HGET', K_limits, '~sealed') == '1' then return {'match', eid} end
  return {'install'}
end
if live ~= sum then return {'differ'} end
if step == 'install' then
  local n = tonumber(ARGV[H + 3])
  for i = 0, n - 1 do
    local at = H + 4 + i * 3
    local kind, f, v = ARGV[at], ARGV[at + 1], ARGV[at + 2]
    if kind == 'l' then
      redis.call('HSET', K_limits, f, v)
    elseif kind == 'b' then
      redis.call('HSET', K_cfg, 'b|' .. f, v)
      bsync(f, bcfg(f))
    else
      redis.call('HSET', K_cfg, 'p|' .. f, v)
      local b, pi = pcfg(f)
      psync(f, bcfg(b), nil, nil, nil, pi)
    end
  end
  return {'ok'}
end
-- seal
if redis.call('HLEN', K_cfg) ~= tonumber(ARGV[H + 3]) then return {'incomplete'} end
redis.call('SET', K_seq, ARGV[H + 4], 'NX')
redis.call('HSET', K_limits, '~sealed', '1')
local eid = epoch()
if eid then return {'ok', eid} end
local g = 0
if ARGV[H + 6] == '1' then g = nowUs() + grace end
redis.call('SET', K_epoch, ARGV[H + 5] .. ' ' .. I(g))
return {'ok', ARGV[H + 5]}
