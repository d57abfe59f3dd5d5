-- setup: ARGV after the header: step, the limits' digest, then the step's
-- arguments. Steps:
--   claim me          → {'install'} | {'match', epoch} | {'differ'}
--                       (me is the process's id: it joins procs; when no
--                       other process is in the namespace, what it holds is
--                       a finished run's and is cleared first)
--   leave me          → {'ok'}
--   install n (kind field value)*n: kind 'l' limits text, 'b' budget, 'p' proxy → {'ok'} | {'differ'}
--   seal fields seq id reset → {'ok', epoch} | {'incomplete'} | {'differ'}
--                       (reset: '1' this process saw the namespace's
--                       data lost: grace from now; '0' it found the
--                       namespace empty: grace from Redis's start; 'n' no
--                       grace, for tests whose Redis is their own)
--   dump              → the limits hash
local function setup()
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
      else
        -- counted once each, whoever installs it: seal checks the count
        if not hget(K_cfg, kind .. '|' .. f) then
          hincr(K_E, 'ncfg', 1)
          if kind == 'p' then hincr(K_E, 'nprox', 1) end
        end
        hset(K_cfg, kind .. '|' .. f, v)
        if kind == 'b' then
          bsync(f, bcfg(f))
        else
          local b, pi = pcfg(f)
          psync(f, bcfg(b), nil, nil, nil, pi)
        end
      end
    end
    flush()
    return {'ok'}
  end
  -- seal
  if num(hget(K_E, 'ncfg'), 0) ~= tonumber(ARGV[H + 3]) then return {'incomplete'} end
  if not hget(K_E, 'seq') then hset(K_E, 'seq', ARGV[H + 4]) end
  redis.call('HSET', K_limits, '~sealed', '1')
  local eid = epoch()
  if eid then
    flush()
    return {'ok', eid}
  end
  local g, now, how = 0, nowUs(), ARGV[H + 6]
  if how == '1' then
    g = now + grace
  elseif how == '0' then
    -- An empty namespace may be a Redis restarted without its data under a
    -- running run, whose leases are still out and not yet registered again:
    -- whoever reaches it first, acquires wait until one grace after Redis
    -- started. By then every holder has registered its leases again or
    -- lost them. A Redis up for longer than that holds no such leases.
    -- Its uptime is whole seconds of the wall clock, the second it reads
    -- less the second it started in: one started 0.1s ago may say 1. Its
    -- start is taken as late as that allows, a second later, so that the
    -- grace is never cut short (it was skipped, for a grace of 1s).
    local up = tonumber(string.match(redis.call('INFO', 'server'), 'uptime_in_seconds:(%d+)'))
    if up then
      local e = now - math.max(up - 1, 0) * 1000000 + grace
      if e > now then g = e end
    else
      g = now + grace
    end
  end
  hset(K_E, 'epoch', ARGV[H + 5] .. ' ' .. I(g))
  flush()
  return {'ok', ARGV[H + 5]}
end
