-- renew: ARGV after the header: the process's id, n, then n times: lease id, the epoch it was
-- taken in, proxy, budget, host. A lease present and valid gets a new expiry;
-- present but expired is removed (LOST, never brought back); missing is LOST,
-- unless Redis lost its data (another epoch) and the grace is still on: then
-- the lease is registered again. Returns {'ok', epoch, status...} with
-- status '1' held, '0' lost; or {'reset'}.
local function renew()
  local now = nowUs()
  local eid, graceEnd = epoch()
  if not eid then return {'reset'} end
  redis.call('ZADD', K_procs, F(now + 3 * ttl), ARGV[H + 1]) -- still in the namespace
  local n = tonumber(ARGV[H + 2])
  local out = {'ok', eid}
  for i = 0, n - 1 do
    local at = H + 3 + i * 5
    local id, le, p, b, host = ARGV[at], ARGV[at + 1], ARGV[at + 2], ARGV[at + 3], ARGV[at + 4]
    local exp = redis.call('ZSCORE', K_leases, id)
    local st = '0'
    if exp then
      if tonumber(exp) > now then
        redis.call('ZADD', K_leases, 'XX', I(now + ttl), id)
        st = '1'
      else
        drop(id, hget(K_linfo, id), 0, now, 0)
      end
    elseif le ~= eid and now < graceEnd then
      redis.call('ZADD', K_leases, I(now + ttl), id)
      hset(K_linfo, id, p .. '\n' .. b .. '\n' .. host .. '\n0\n' .. I(now) .. '\n0')
      local c = bcfg(b)
      local bin = hincr(K_bin, b, 1)
      local pin = bin
      if not c.only then pin = hincr(K_pin, p, 1) end
      hincr(K_hosts, 'i|' .. host, 1)
      psync(p, c, nil, nil, pin)
      bsync(b, c, bin)
      st = '1'
    end
    out[#out + 1] = st
  end
  flush()
  return out
end
