-- acquire: ARGV after the header: n, due, then n requests of four
-- arguments each: lease id, host, avoided proxies ("\n"-joined) and host
-- due. due and host due are the process's logical times for rates ('' for
-- none; see below). The requests are a process's waiters in its queue's
-- order, tried in turn in one call: one round trip asks for as many as can
-- start. Returns a reply for each request tried, in order; it stops after
-- a 'wait' 'all', a 'reset' or a 'dead' (those behind would be told the
-- same), and the epoch, the grace after a reset and a pool that cannot
-- serve are looked at once for the call. A request whose host was told to wait earlier in the
-- call is told the same without being tried. For each request it chooses
-- a proxy by the policy among the first M budgets of bidx and their first
-- M proxies, skipping benched, at-cap and rate-limited ones, and takes the
-- lease, the counts and every token in one step. A request's reply is
--   {'ok', proxy, budget, proxyInFlight, hostInFlight, epoch, probe, now, charged, next, global, hostNext}
--     (charged: the time the rate tokens were charged at, see gcra, 0
--     with no rate; next:
--     when the same request's next token of the global and proxy rates
--     comes due, 0 with none; global: when the global rate's next comes
--     due, 0 with none; hostNext: when its host's next comes due, 0 with
--     no host rate)
--   {'wait', 'host'|'all', µs, now, hard, why}   (µs -1: until a release; hard '1':
--                                  nothing of any process starts before, the
--                                  global rate or the grace after a reset; why:
--                                  what it waits for, one of grace, retry-after,
--                                  host-concurrency, host-rate, global-rate,
--                                  benched, pushback, proxy-rate, proxy-concurrency)
--   {'banned', n}                 (the host banned every proxy that could serve
--                                  it, n of them: it fails; other hosts go on)
--   {'reset'}                     (no epoch: Redis lost its data)
--   {'dead', n, rejected, µs}     (the pool of n proxies cannot serve: every one
--                                  rejected, or none healthy for µs = the pool wait)
local now, due, eid -- the call's: when it runs, its due (see below) and the epoch
-- due is the process's logical time for the global and proxy rates: when
-- its next token comes due, as a wait told it, or while others of the
-- process wait, its last grant; host due is the same for the request's
-- host and its host rate, which each host keeps on its own. An ask arrives
-- late by its timer and a round trip, or by the round trips of the asks
-- before it: its rate tokens are charged at due (or when they came due, if
-- later), so the lateness does not add up, but only when due has passed
-- and is at most LATE µs before now. A limiter that was idle can so give
-- at most LATE µs of tokens at once: a process that stalled catches up
-- with its schedule by at most that much. Every request of a call is
-- charged from the same due (and its host's): a limiter's tokens are
-- charged at the later of due and when they came due, so the requests
-- after a grant on one limiter are charged on schedule too, whether they
-- go to the same limiter (its next token) or another (its own). LATE
-- comes in the header (dispatch.go's late).

local function onTime(due)
  if due and (due > now or now - due > LATE) then return nil end
  return due
end

-- memberFields appends to fs the fields of st an acquire reads of budget
-- config c's sole member, if it has one (paired: with its pushback pair
-- for host), and returns fs.
local function memberFields(fs, c, paired, host)
  if c.only then
    fs[#fs + 1] = K_probe .. c.only
    if paired then fs[#fs + 1] = K_hosts .. 'p|' .. c.only .. '|' .. host end
  end
  return fs
end

-- sooner returns the sooner of the wait (soonest µs, why) and w for what:
-- soonest -1 is none yet.
local function sooner(soonest, why, w, what)
  if soonest < 0 or w < soonest then return w, what end
  return soonest, why
end

-- The pages of bidx an acquire looks at: the first two budgets, then the
-- rest of the M (see acquireOne).
local pagesM, pagesFor = nil, nil
local noAvoid = {} -- never written

-- nextAt is when a limiter whose new TAT is new comes due again: 0 for
-- none (new nil).
local function nextAt(new, T, tau) if new then return new + T - tau end return 0 end

local function acquireOne(id, host, avoidS, hdue)
  hdue = onTime(hdue)
  -- The host as a whole (see hostLearn): banned by every proxy, or held
  -- by a Retry-After told through two or more.
  local hbans = '0'
  local xv = hget(K_hosts, 'x|' .. host)
  if xv then
    local x = split(xv, ' ')
    if x[2] ~= '0' then return {'banned', x[2]} end
    if tonumber(x[1]) > now then return {'wait', 'host', I(tonumber(x[1]) - now), I(now), '0', 'retry-after'} end
    hbans = x[3]
  end

  -- Every command costs Redis's one thread a microsecond or so: a limit
  -- not in use is not read.
  local hi = 'i|' .. host
  if hostCap > 0 and num(hget(K_hosts, hi), 0) >= hostCap then
    hset(K_E, 'want', I(now + 2000000)) -- some process waits for a release
    return {'wait', 'host', '-1', I(now), '0', 'host-concurrency'}
  end
  local hw, hnew, hat = 0, nil, 0
  if hostT > 0 then
    hw, hnew, hat = gcra(hget(K_hosts, 't|' .. host), now, hostT, hostTau, hdue)
    if hw > 0 then return {'wait', 'host', I(hw), I(now), '0', 'host-rate'} end
  end
  local gw, gnew, gat = 0, nil, 0
  if globT > 0 then
    gw, gnew, gat = gcra(hget(K_tat, 'g'), now, globT, globTau, due)
    if gw > 0 then return {'wait', 'all', I(gw), I(now), '1', 'global-rate'} end
  end

  local avoid = noAvoid
  if avoidS ~= '' then
    avoid = {}
    for _, p in ipairs(split(avoidS, '\n')) do avoid[p] = true end
  end
  local paired = pushBase > 0 and hget(K_hosts, 'q|' .. host) ~= false
  local soonest, why, paced = -1, 'proxy-concurrency', false

  local pick, fb
  -- The first two budgets, and the rest of the M only when neither
  -- serves: most acquires take the first, and each budget a reply holds
  -- costs the script's conversion of it.
  if pagesFor ~= M * 4 + policy then
    pagesFor = M * 4 + policy
    pagesM = {{0, math.min(1, M - 1)}, {2, M - 1}}
    if policy == 3 then pagesM = {{0, M - 1}} end
  end
  local pages = pagesM
  for _, pg in ipairs(pages) do
    local budgets
    if policy == 3 then
      budgets = redis.call('ZRANDMEMBER', K_bidx, M)
    elseif pg[1] <= pg[2] then
      budgets = redis.call('ZRANGE', K_bidx, pg[1], pg[2])
    else
      budgets = {}
    end
    for _, b in ipairs(budgets) do
      -- A budget's fields and its sole member's (most budgets are one
      -- proxy's) in one HMGET, as a budget is looked at, for most acquires
      -- take the first; in two when its config is yet to be read.
      local fs = {K_bin .. b, K_bused .. b, K_bavail .. b, K_tat .. 'b|' .. b}
      local c = cfgCache[b]
      if c then memberFields(fs, c, paired, host) else fs[5] = K_cfg .. 'b|' .. b end
      prefetch(fs)
      if not c then
        c = bcfg(b)
        prefetch(memberFields({}, c, paired, host))
      end
      if c.cap <= 0 or num(hget(K_bin, b), 0) < c.cap then
        local w, bnew, bat = 0, nil, 0
        if c.T > 0 then w, bnew, bat = gcra(hget(K_tat, 'b|' .. b), now, c.T, c.tau, due) end
        if w > 0 then
          soonest, why = sooner(soonest, why, w, 'proxy-rate')
        else
          local lo = c.bi * SPAN
          local off = 0
          if policy == 3 and c.members > 1 then off = seed % c.members end
          local ps
          if c.only then
            -- in bidx, so with its one member available
            ps = {c.only, lo}
          else
            ps = redis.call('ZRANGEBYSCORE', K_pidx, I(lo), I(lo + OFF), 'WITHSCORES', 'LIMIT', off, M)
            if #ps == 0 and off > 0 then
              ps = redis.call('ZRANGEBYSCORE', K_pidx, I(lo), I(lo + OFF), 'WITHSCORES', 'LIMIT', 0, M)
            end
          end
          for i = 1, #ps, 2 do
            local p, sc = ps[i], tonumber(ps[i + 1])
            if sc - lo >= OFF then
              if policy ~= 3 then
                -- sorted: every proxy from here on is benched or has its probe out
                local u = redis.call('ZSCORE', K_bench, p)
                if u then soonest, why = sooner(soonest, why, math.max(tonumber(u) - now, 1), 'benched') end
                break
              end
            else
              local ok, pr = true, nil
              if paired then
                pr = getPair('p|' .. p .. '|' .. host)
                if pr then
                  if pr.inflight >= pr.window then
                    ok = false
                    paced = true
                  elseif pr.nxt > now then
                    ok = false
                    soonest, why = sooner(soonest, why, pr.nxt - now, 'pushback')
                  end
                end
              end
              if ok then
                local cand = {p = p, b = b, c = c, new = bnew, at = bat, pair = pr}
                if not avoid[p] then pick = cand break end
                if not fb then fb = cand end
              end
            end
          end
          if pick then break end
        end
      end
    end
    if pick or #budgets < pg[2] - pg[1] + 1 then break end
  end
  if not pick then pick = fb end
  if not pick then
    local total = num(hget(K_E, 'nprox'), 0)
    local rejected = num(hget(K_E, 'nrej'), 0)
    if total > 0 and rejected >= total then
      hset(K_tat, 'dead', I(total) .. ' ' .. I(rejected) .. ' 0')
      return {'dead', I(total), I(rejected), '0'}
    end
    -- Benched and probing proxies have a probe entry, rejected ones none:
    -- when they add up to every proxy, none is healthy, and the pool's wait
    -- runs from the first acquire that saw it so (field nh of tat).
    if poolWait > 0 and total > 0 and num(hget(K_E, 'nprobe'), 0) + rejected >= total then
      local since = tonumber(hget(K_tat, 'nh'))
      if not since then
        since = now
        hset(K_tat, 'nh', F(now))
      end
      if now - since >= poolWait then
        hset(K_tat, 'dead', I(total) .. ' ' .. I(rejected) .. ' ' .. I(poolWait))
        return {'dead', I(total), I(rejected), I(poolWait)}
      end
      soonest, why = sooner(soonest, why, poolWait - (now - since), 'benched')
    end
    if rejected > 0 or num(hget(K_E, 'nprobe'), 0) > 0 then -- some proxy is benched
      local first = redis.call('ZRANGE', K_bench, 0, 0, 'WITHSCORES')
      if first[2] then soonest, why = sooner(soonest, why, math.max(tonumber(first[2]) - now, 1), 'benched') end
    end
    if soonest < 0 and paced then why = 'pushback' end
    hset(K_E, 'want', I(now + 2000000)) -- some process waits for a release
    return {'wait', 'all', I(soonest), I(now), '0', why}
  end

  local p, b, c = pick.p, pick.b, pick.c
  if pick.new then hset(K_tat, 'b|' .. b, F(pick.new)) end
  if hnew then hset(K_hosts, 't|' .. host, F(hnew)) end
  if gnew then hset(K_tat, 'g', F(gnew)) end
  -- A candidate of pidx is neither benched nor has its probe out: it is
  -- available unless this is its probe.
  local probe = '0'
  if not c.only then prefetch({K_probe .. p, K_pin .. p, K_pused .. p}) end
  if hget(K_probe, p) == '0' then
    setProbe(p, '1')
    avail(b, c, -1)
    probe = '1'
  end
  redis.call('ZADD', K_leases, I(now + ttl), id)
  -- A proxy alone in its budget keeps no counts of its own: its budget's
  -- are its.
  local bin = hincr(K_bin, b, 1)
  local pin = bin
  if not c.only then pin = hincr(K_pin, p, 1) end
  -- A host's idle-state sweep (hexp) leaves a host with attempts in flight
  -- alone, so it need not be told the host is busy again.
  local hin2 = hincr(K_hosts, hi, 1)
  local pused, bused
  if policy == 2 then
    local s = hincr(K_E, 'seq', 1)
    if not c.only then hset(K_pused, p, I(s)) end
    hset(K_bused, b, I(s))
    pused, bused = s, s
  else
    bused = hincr(K_bused, b, 1)
    pused = bused
    if not c.only then pused = hincr(K_pused, p, 1) end
  end
  local pflag = '0'
  if pick.pair then
    pick.pair.nxt = now + pick.pair.spacing
    pick.pair.inflight = pick.pair.inflight + 1
    putPair('p|' .. p .. '|' .. host, pick.pair)
    pflag = '1'
  end
  hset(K_linfo, id, p .. '\n' .. b .. '\n' .. host .. '\n' .. probe .. '\n' .. I(now) .. '\n' .. pflag .. '\n' .. hbans)
  psync(p, c, probe == '0', pused, pin)
  bsync(b, c, bin, bused)
  -- The time the tokens were charged at: the latest of the limiters'. And
  -- when the same request's next token comes due: the latest of the global
  -- and proxy limiters' next, and the host's on its own, which the process
  -- sends back as its due times, so that the ask for it is charged on
  -- schedule when it arrives a round trip late.
  local nxt = math.max(nextAt(gnew, globT, globTau), nextAt(pick.new, c.T, c.tau))
  -- Numbers, not strings: Redis sends a Lua number as an integer, which
  -- costs less than formatting it here.
  return {'ok', p, b, pin, hin2, eid, probe, now, math.max(hat, gat, pick.at), nxt,
          nextAt(gnew, globT, globTau), nextAt(hnew, hostT, hostTau)}
end

-- acquire is the entry point: it tries the call's requests in order.
local function acquire()
  now = nowUs()
  local n = tonumber(ARGV[H + 1])
  due = onTime(tonumber(ARGV[H + 2]))
  -- What the call reads first, in one HMGET: the namespace's own fields and
  -- each request's host's.
  local fs = {K_E .. 'epoch', K_E .. 'sweep', K_tat .. 'dead', K_E .. 'nprox', K_E .. 'nrej', K_E .. 'nprobe'}
  if globT > 0 then fs[#fs + 1] = K_tat .. 'g' end
  local seen = {} -- a process's waiters are often of one host
  for i = 1, n do
    local host = ARGV[H + 2 + (i - 1) * 4 + 2]
    if not seen[host] then
      seen[host] = true
      fs[#fs + 1] = K_hosts .. 'x|' .. host
      fs[#fs + 1] = K_hosts .. 'i|' .. host
      if hostT > 0 then fs[#fs + 1] = K_hosts .. 't|' .. host end
      if pushBase > 0 then fs[#fs + 1] = K_hosts .. 'q|' .. host end
    end
  end
  prefetch(fs)
  local graceEnd
  eid, graceEnd = epoch()
  if not eid then return {{'reset'}} end
  keepCfg(eid)
  if now < graceEnd then return {{'wait', 'all', I(graceEnd - now), I(now), '1', 'grace'}} end
  -- A pool that could not serve stays so for the rest of the run.
  local dead = hget(K_tat, 'dead')
  if dead then
    local f = split(dead, ' ')
    return {{'dead', f[1], f[2], f[3]}}
  end
  local swept = sweeps(now)
  local out, hostWait = {}, {}
  for i = 1, n do
    local a = H + 2 + (i - 1) * 4
    local host = ARGV[a + 2]
    local r = hostWait[host]
    if not r then
      r = acquireOne(ARGV[a + 1], host, ARGV[a + 3], tonumber(ARGV[a + 4]))
      if r[1] == 'wait' and not swept then -- what expired leases hold may be what it waits for
        swept = true
        if sweepLeases(now) > 0 then r = acquireOne(ARGV[a + 1], host, ARGV[a + 3], tonumber(ARGV[a + 4])) end
      end
      if (r[1] == 'wait' and r[2] == 'host') or r[1] == 'banned' then hostWait[host] = r end
    end
    out[i] = r
    if r[1] ~= 'ok' and r[1] ~= 'banned' and (r[1] ~= 'wait' or r[2] ~= 'host') then break end
  end
  flush()
  return out
end
