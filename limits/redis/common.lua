-- Shared by every script of package limits/redis, which Redis runs as the
-- functions of one library (FUNCTION LOAD, Redis 7 and later) or, before
-- that, as scripts (EVALSHA): each entry point calls begin with its keys
-- and arguments first. A library's functions are made once, when it is
-- loaded; a script makes every one of its functions again at each call,
-- which cost a run of this code a fifth of its time.
--
-- All keys are passed in KEYS, in this order, and share one hash tag so the
-- namespace lives in one Redis Cluster slot. Times are whole microseconds
-- on the Redis clock.
--
-- The namespace's small state is one hash, st, whose fields are named by a
-- prefix for what they are (K_cfg, K_pin, ... below) and the proxy, budget,
-- host or lease. A script reads and writes it through a cache (hget, hset,
-- hincr, hdel; prefetch reads many fields in one HMGET) and writes it back
-- in one HSET and one HDEL at its end (flush): every command a script calls
-- costs Redis's one thread a microsecond or more, the cache's work less.
-- The sorted sets stay keys of their own.
local KEYS, ARGV
local K_limits, K_st, K_bidx, K_pidx, K_leases, K_hexp, K_bench, K_procs -- procs: the processes in the namespace, scored by when they are gone
-- Prefixes of st's fields. K_E holds the namespace's own: epoch ("id grace
-- end"), sweep (when the next sweep is due), want (until when some process
-- waits for a release), seq (the round-robin counter), nprox (proxies),
-- ncfg (cfg fields), nprobe (probe fields), nrej (proxies rejected).
local K_cfg, K_pin, K_pused, K_bin, K_bused = 'c:', 'i:', 'u:', 'j:', 'v:'
local K_tat, K_hosts, K_probe, K_health, K_bavail = 't:', 'h:', 'o:', 'e:', 'a:'
local K_linfo, K_E = 'l:', '~'

-- The header every client sends first; processes of a namespace agree on
-- it. begin reads it:
local policy       -- 0 least-inflight, 1 least-used, 2 round-robin, 3 random
local ttl          -- lease TTL
local M            -- candidates looked at per acquire
local sweepK       -- expired leases and idle hosts swept per acquire
local hostCap
local hostT, hostTau
local globT, globTau
local maxFail, cooldown, maxCool
local pushBase, pushMax
local chan
local seed
local grace        -- refusal after a reset
local poolWait     -- how long no proxy may be healthy before the pool cannot serve; 0 never
local BAN_HOSTS    -- limits.BanHosts: distinct hosts banning a proxy in a row bench it
local FORGIVE      -- limits.StreakToForgive: successes in a row that reset the cooldown's doubling
local LATE         -- µs an ask may come late and still be charged on schedule (see acquire.lua)
local RAMAX        -- µs: the longest a host waits as a whole for a Retry-After; 0 never
local RAWIN        -- µs: limits.RetryAfterWindow
local SWEEP        -- µs between the sweeps (see sweeps)
local H = 23

-- What one call keeps: the cache of st (cached[field] is its value, false
-- when missing; dirty lists the fields written, in order, for flush), the
-- budgets' configs read, and whether some process waits for a release
-- (see drop).
local cached, isDirty, dirty, cfgCache, wanted

local hdr = {} -- the header of the last call, as begin read it

-- What a library keeps from call to call (a script, nothing): the
-- budgets' configs, which do not change while an epoch of a namespace
-- lasts (see keepCfg), and the last epoch field read, split.
local cfgKept, cfgKeptFor, cfgKeptN = {}, nil, 0
local epochV, epochId, epochGrace

-- begin starts a call with its keys and arguments.
local function begin(keys, args)
  KEYS, ARGV = keys, args
  K_limits, K_st, K_bidx, K_pidx = keys[1], keys[2], keys[3], keys[4]
  K_leases, K_hexp, K_bench, K_procs = keys[5], keys[6], keys[7], keys[8]
  cached, isDirty, dirty, cfgCache, wanted = {}, {}, {}, {}, nil
  seed = tonumber(args[16]) -- a new one every call
  -- The rest is a namespace's, the same call after call: compared as
  -- strings (Lua's are interned: a comparison is of two pointers), not
  -- parsed again.
  local same = true
  for i = 1, H do
    if i ~= 16 and hdr[i] ~= args[i] then same = false break end
  end
  if same then return end
  for i = 1, H do hdr[i] = args[i] end
  policy, ttl, M, sweepK = tonumber(args[1]), tonumber(args[2]), tonumber(args[3]), tonumber(args[4])
  hostCap = tonumber(args[5])
  hostT, hostTau = tonumber(args[6]), tonumber(args[7])
  globT, globTau = tonumber(args[8]), tonumber(args[9])
  maxFail, cooldown, maxCool = tonumber(args[10]), tonumber(args[11]), tonumber(args[12])
  pushBase, pushMax = tonumber(args[13]), tonumber(args[14])
  chan = args[15]
  grace, poolWait = tonumber(args[17]), tonumber(args[18])
  BAN_HOSTS, FORGIVE, LATE = tonumber(args[19]), tonumber(args[20]), tonumber(args[21])
  RAMAX, RAWIN = tonumber(args[22]), tonumber(args[23])
  SWEEP = math.min(100000, math.max(math.floor(ttl / 8), 1000))
end

local SUCCESS, FAULT, PUSHBACK, REJECTED, BANNED = 1, 2, 3, 4, 5
local FOREVER = 3.15e15 -- a hundred years, in microseconds: the bench of a rejected proxy
local SPAN = 4294967296               -- pidx: budget b's proxies score in [bi*SPAN, bi*SPAN+SPAN-1]
local OFF = SPAN - 1                  -- a proxy's score when benched or its probe is out

local function I(x) return string.format('%d', x) end
local function F(x) return string.format('%.17g', x) end

local function nowUs()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local function split(s, sep)
  local out, i = {}, 1
  while true do
    local j = string.find(s, sep, i, true)
    if not j then out[#out + 1] = string.sub(s, i); return out end
    out[#out + 1] = string.sub(s, i, j - 1)
    i = j + #sep
  end
end

local function num(v, d) if v then return tonumber(v) end return d end

local function hget(K, f)
  local k = K .. f
  local v = cached[k]
  if v == nil then
    v = redis.call('HGET', K_st, k)
    cached[k] = v
  end
  return v
end

-- put sets field k (its whole name) to v and marks it for flush.
local function put(k, v)
  cached[k] = v
  if not isDirty[k] then
    isDirty[k] = true
    dirty[#dirty + 1] = k
  end
end

-- hset sets field f of K to v, a string, or deletes it (v false).
local function hset(K, f, v) put(K .. f, v) end

local function hdel(K, f) hset(K, f, false) end

local function hincr(K, f, d)
  local k = K .. f
  local v = cached[k]
  if v == nil then v = redis.call('HGET', K_st, k) end
  local n = (tonumber(v) or 0) + d
  put(k, string.format('%d', n))
  return n
end

-- prefetch reads the fields of fs (whole names, prefix and all) not in
-- the cache, in one HMGET.
local function prefetch(fs)
  local need = {}
  for _, k in ipairs(fs) do
    if cached[k] == nil then need[#need + 1] = k end -- one twice is read twice: harmless
  end
  if #need == 0 then return end
  local vs = redis.call('HMGET', K_st, unpack(need))
  for i, k in ipairs(need) do cached[k] = vs[i] end
end

-- flush writes the fields set back to st; every script calls it last.
local function flush()
  local set, del = {}, {}
  for _, k in ipairs(dirty) do
    local v = cached[k]
    if v then
      set[#set + 1] = k
      set[#set + 1] = v
    else
      del[#del + 1] = k
    end
  end
  -- in bounded pieces: unpack has a limit on its values
  for i = 1, #set, 512 do redis.call('HSET', K_st, unpack(set, i, math.min(i + 511, #set))) end
  for i = 1, #del, 256 do redis.call('HDEL', K_st, unpack(del, i, math.min(i + 255, #del))) end
  dirty, isDirty = {}, {}
end

-- bcfg: budget b's cap, rate period T, tolerance tau, index, members and,
-- when it has one member, its name (only): such a budget's proxy is not in
-- pidx, which only chooses among a budget's members.
local function bcfg(b)
  local c = cfgCache[b]
  if c then return c end
  local v = hget(K_cfg, 'b|' .. b)
  if not v then return error('limits/redis: no config for budget ' .. b) end
  local f = split(v, ' ')
  c = {cap = tonumber(f[1]), T = tonumber(f[2]), tau = tonumber(f[3]), bi = tonumber(f[4]), members = tonumber(f[5]),
       only = f[6]}
  cfgCache[b] = c
  cfgKeptN = cfgKeptN + 1
  return c
end

-- pcfg: proxy p's budget and its index among the budget's members.
local function pcfg(p)
  local v = hget(K_cfg, 'p|' .. p)
  if not v then return error('limits/redis: no config for proxy ' .. p) end
  local f = split(v, ' ')
  return f[1], tonumber(f[2])
end

-- gcra: a rate limit by the generic cell rate algorithm, on the Redis clock.
-- It returns how long until an admission at now is allowed (0: now), and
-- when it is, the limiter's new theoretical arrival time (TAT) and the time
-- the admission is charged at. That is due when one is given (the
-- process's logical time, when its token came due, which acquire takes only
-- shortly before now), else now, or the time the limiter allowed it when
-- that is later: charged at due, a waiter's timer lateness and round trips
-- are not lost to the rate. Whether it is allowed does not depend on due. The times charged
-- meet the bound (at most burst-1+ceil(W/T) in any window of length W).
-- Without a rate (T <= 0) nothing is charged: the time is 0.
local function gcra(tat, now, T, tau, due)
  if T <= 0 then return 0, nil, 0 end
  local at = due or now
  tat = math.max(tonumber(tat or at), at)
  local new = tat + T
  if now < new - tau then return math.ceil(new - tau - now), nil, nil end
  return 0, new, math.max(at, new - tau)
end

-- available: a proxy neither benched nor with its probe out. A proxy with
-- no probe field is not benched, or rejected: health 'R'.
local function available(p)
  local pr = hget(K_probe, p)
  if not pr then return hget(K_health, p) ~= 'R' end
  return pr ~= '1' and not redis.call('ZSCORE', K_bench, p)
end

-- setProbe sets proxy p's probe field ('0' probing or benched, '1' its
-- probe out, false neither) and keeps their count, nprobe.
local function setProbe(p, v)
  local had = hget(K_probe, p)
  if (had and 1 or 0) ~= (v and 1 or 0) then hincr(K_E, 'nprobe', v and 1 or -1) end
  hset(K_probe, p, v)
end

-- sweepBy makes the sweeps due by t at the latest (see sweeps).
local function sweepBy(t)
  local v = hget(K_E, 'sweep')
  if v and t < tonumber(v) then hset(K_E, 'sweep', I(t)) end
end

-- leaseFields appends to out the fields of st that every release of a
-- lease of proxy p, budget b and host reads, for prefetch.
local function leaseFields(out, p, b, host)
  if not cfgCache[b] then out[#out + 1] = K_cfg .. 'b|' .. b end
  out[#out + 1] = K_bin .. b
  out[#out + 1] = K_bused .. b
  out[#out + 1] = K_bavail .. b
  out[#out + 1] = K_probe .. p
  out[#out + 1] = K_health .. p
  out[#out + 1] = K_hosts .. 'i|' .. host
  out[#out + 1] = K_hosts .. 'x|' .. host -- for hostIdle
  if pushBase > 0 then out[#out + 1] = K_hosts .. 'q|' .. host end
  if RAMAX > 0 then out[#out + 1] = K_hosts .. 'r|' .. host end
  return out
end

local function usedDefault(idx) if policy == 2 then return idx end return 0 end

-- psync rescores proxy p of budget config c in pidx from its state. The
-- caller passes what it knows already, so that it is not read again (every
-- command a script calls costs Redis's one thread a microsecond or so): av,
-- whether p is available; used, its attempts (or round-robin turn); inf,
-- its attempts in flight; pi, its index among its budget's members, which
-- only the round-robin default of used needs. Each may be nil: read.
local function psync(p, c, av, used, inf, pi)
  if c.only then return end
  if av == nil then av = available(p) end
  local s
  if not av then
    s = OFF
  elseif policy == 3 then
    s = 0
  else
    if used == nil then
      used = tonumber(hget(K_pused, p))
      if not used and policy == 2 then
        if not pi then _, pi = pcfg(p) end
        used = pi
      end
      used = used or 0
    end
    if policy == 0 then
      if inf == nil then inf = num(hget(K_pin, p), 0) end
      s = math.min(inf, 2047) * 2097152 + math.min(used, 2097151)
    else
      s = math.min(used, OFF - 1)
    end
  end
  redis.call('ZADD', K_pidx, I(c.bi * SPAN + s), p)
end

-- bsync puts budget b in bidx, scored by the policy, when it has room and
-- an available member, and takes it out otherwise. inf (its attempts in
-- flight) and used (its attempts, or round-robin turn) may be given when
-- known, as psync's.
local function bsync(b, c, inf, used)
  if inf == nil then inf = num(hget(K_bin, b), 0) end
  local av = num(hget(K_bavail, b), c.members)
  if (c.cap > 0 and inf >= c.cap) or av <= 0 then
    redis.call('ZREM', K_bidx, b)
    return
  end
  local s
  if policy == 3 then
    s = 0
  else
    if used == nil then used = num(hget(K_bused, b), usedDefault(c.bi)) end
    if policy == 0 then
      local cap = c.cap
      if cap <= 0 then cap = 1000 end
      s = math.min(math.floor(inf * 1048576 / cap), 1048575) * SPAN + math.min(used, OFF)
    elseif policy == 1 then
      s = math.floor(used / c.members)
    else
      s = used
    end
  end
  redis.call('ZADD', K_bidx, I(s), b)
end

-- avail adjusts budget b's count of available members by d.
local function avail(b, c, d)
  local v = num(hget(K_bavail, b), c.members) + d
  if v >= c.members then
    hdel(K_bavail, b) -- missing means all
  else
    hset(K_bavail, b, I(math.max(v, 0)))
  end
end

-- pair state of proxy p and host h, pushed back: window full inflight spacing next pushedAt.
local function getPair(key)
  local v = hget(K_hosts, key)
  if not v then return nil end
  local f = split(v, ' ')
  return {window = tonumber(f[1]), full = tonumber(f[2]), inflight = tonumber(f[3]),
          spacing = tonumber(f[4]), nxt = tonumber(f[5]), pushedAt = tonumber(f[6])}
end

local function putPair(key, pr)
  hset(K_hosts, key, I(pr.window) .. ' ' .. I(pr.full) .. ' ' .. I(math.max(pr.inflight, 0)) .. ' ' ..
    I(pr.spacing) .. ' ' .. I(pr.nxt) .. ' ' .. I(pr.pushedAt))
end

-- leastUsedOther: the fewest attempts of an available proxy other than p
-- among the first candidates of p's budget.
local function leastUsedOther(p, c)
  local lo = c.bi * SPAN
  local r = redis.call('ZRANGEBYSCORE', K_pidx, I(lo), '(' .. I(lo + OFF), 'LIMIT', 0, 4)
  local best = nil
  for _, q in ipairs(r) do
    if q ~= p then
      local u = num(hget(K_pused, q), 0)
      if not best or u < best then best = u end
    end
  end
  return best
end

-- benchFor benches proxy p (of budget b, config c) at its cooldown
-- level, from now; wasAvail says whether it was available. It returns the
-- event.
local function benchFor(p, b, c, level, now, wasAvail)
  local d = cooldown * math.pow(2, math.min(level, 30))
  if maxCool > 0 and (d > maxCool or d <= 0) then d = maxCool end
  setProbe(p, '0')
  redis.call('ZADD', K_bench, F(now + d), p)
  sweepBy(now + d)
  if wasAvail then avail(b, c, -1) end
  return {'benched', I(d)}
end

-- learn updates proxy health and pair pushback from an attempt's outcome,
-- as limits.Local does; paired says whether the attempt was granted under
-- a pushback pair of p and host, and pair is then that pair as the caller
-- has just read and written it (nil: gone), so that it is not read again. It returns an event {state, cooldown} or nil, and
-- whether p is available now (nil: not known, see psync).
--
-- A proxy's health is "fails streak level row" in field p of health, missing
-- when all are 0: the streak is kept only up to FORGIVE, all that counts of
-- it, so that a healthy proxy's successes leave it as it is and it is not
-- written again; row is 1 while field b|p holds the hosts that banned it in
-- a row, so that a success need not delete a row that is not there.
local function learn(p, b, c, host, o, now, granted, probe, pinflight, paired, pair)
  local ev = nil
  local pr = hget(K_probe, p)
  local probing = pr ~= false
  local fails, streak, level, row = 0, 0, 0, '0'
  local hv = hget(K_health, p)
  if hv == 'R' then
    return nil, false -- rejected already: out of the run for good
  end
  if hv then
    local f = split(hv, ' ')
    fails, streak, level, row = tonumber(f[1]), tonumber(f[2]), tonumber(f[3]), f[4] or '1'
  end
  -- Only a proxy with a probe field can be benched (a rejected one is 'R').
  local benchEnd = false
  if pr then benchEnd = redis.call('ZSCORE', K_bench, p) end
  local wasAvail = pr ~= '1' and not benchEnd
  local isAvail = wasAvail
  if o == REJECTED then
    -- Its credentials were refused: benched for ever, for every process.
    setProbe(p, false)
    hset(K_health, p, 'R'); hdel(K_health, 'b|' .. p)
    hincr(K_E, 'nrej', 1)
    redis.call('ZADD', K_bench, F(now + FOREVER), p)
    if wasAvail then avail(b, c, -1) end
    return {'rejected', '0'}, false
  end
  local banRow = false -- a ban that makes BAN_HOSTS distinct hosts in a row
  if o == BANNED and not (probing and not probe) then
    -- the distinct hosts that banned p in a row, as limits.Local's banStreak
    local bk = 'b|' .. p
    local bv = hget(K_health, bk)
    local hs = {}
    if bv then hs = split(bv, ' ') end
    local known = false
    for _, h in ipairs(hs) do if h == host then known = true end end
    if not known then
      if #hs + 1 >= BAN_HOSTS then
        hdel(K_health, bk)
        banRow = true
        row = '0'
      else
        hs[#hs + 1] = host
        hset(K_health, bk, table.concat(hs, ' '))
        row = '1'
      end
    end
  end
  if probing and not probe then
    -- begun before the bench: no verdict on the proxy now
  elseif o == SUCCESS or o == PUSHBACK then
    if row ~= '0' then
      hdel(K_health, 'b|' .. p) -- the row of bans is broken
      row = '0'
    end
    fails = 0
    streak = math.min(streak + 1, FORGIVE)
    if streak >= FORGIVE then level = 0 end
    if probing then
      setProbe(p, false)
      redis.call('ZREM', K_bench, p)
      if not wasAvail then avail(b, c, 1) end
      isAvail = true
      if policy ~= 2 and not c.only then
        local lo = leastUsedOther(p, c)
        local u = num(hget(K_pused, p), 0)
        if lo and lo > u then hset(K_pused, p, I(lo)) end
      end
      hdel(K_tat, 'nh') -- a proxy is healthy: the pool's wait is over
      ev = {'healthy', '0'}
    end
  elseif o == FAULT then
    streak = 0
    fails = fails + 1
    if maxFail > 0 and (probing or fails >= maxFail) then
      ev = benchFor(p, b, c, level, now, wasAvail)
      level, fails, isAvail = level + 1, 0, false
    end
  elseif banRow and maxFail > 0 then
    streak = 0
    ev = benchFor(p, b, c, level, now, wasAvail)
    level, fails, isAvail = level + 1, 0, false
  elseif probe then -- a probe with no verdict (a ban among them): another may go
    setProbe(p, '0')
    if not wasAvail and not redis.call('ZSCORE', K_bench, p) then avail(b, c, 1) end
    isAvail = nil
  end
  if fails == 0 and streak == 0 and level == 0 and row == '0' then
    if hv then hdel(K_health, p) end
  else
    local v = I(fails) .. ' ' .. I(streak) .. ' ' .. I(level) .. ' ' .. row
    if v ~= hv then hset(K_health, p, v) end
  end

  -- A success changes a pair only when it was granted under it: a pair made
  -- since is newer than the attempt.
  if pushBase <= 0 or not (o == PUSHBACK or o == BANNED or (o == SUCCESS and paired)) then return ev, isAvail end
  local key = 'p|' .. p .. '|' .. host
  if not paired then pair = getPair(key) end
  local fresh = pair == nil or granted > pair.pushedAt
  if (o == PUSHBACK or o == BANNED) and fresh then
    if not pair then
      pair = {window = math.max(math.floor(pinflight / 2), 1), full = math.max(pinflight, 2), inflight = 0, spacing = 0}
      local q = hget(K_hosts, 'q|' .. host)
      if q then q = q .. ' ' .. p else q = p end
      hset(K_hosts, 'q|' .. host, q)
    elseif pair.window > 1 then
      pair.window = math.max(math.floor(pair.window / 2), 1)
    else
      pair.spacing = math.max(pair.spacing * 2, pushBase)
      if pushMax > 0 then pair.spacing = math.min(pair.spacing, pushMax) end
    end
    pair.pushedAt = now
    pair.nxt = now + pair.spacing
    putPair(key, pair)
  elseif o == SUCCESS and pair and fresh then
    if pair.spacing > 0 then
      pair.spacing = math.floor(pair.spacing / 2)
      if pair.spacing < pushBase / 4 then pair.spacing = 0 end
      putPair(key, pair)
    else
      pair.window = pair.window + 1
      if pair.window >= pair.full then hdel(K_hosts, key) else putPair(key, pair) end
    end
  end
  return ev, isAvail
end

-- The host as a whole, as limits.Local keeps it (see limits/hostwait.go).
-- Field x|host of hosts is "until dead bans", read by every acquire for the
-- host (one HGET): until, the µs its Retry-After holds every proxy to; dead,
-- how many proxies it banned once it has banned every one that could serve
-- it ('0' before); bans, '1' while y|host lists proxies it banned. y|host
-- is those proxies, with no success through them since, space-joined;
-- r|host the Retry-After answers of the last RAWIN, "proxy at until" each.
-- y| and r| are read only on a ban, a Retry-After, or the success of an
-- attempt granted while the host had bans (the lease's flag), so that an
-- attempt to a host with none costs only the one HGET.
local function getX(host)
  local v = hget(K_hosts, 'x|' .. host)
  if not v then return {0, '0', '0'} end
  local f = split(v, ' ')
  return {tonumber(f[1]), f[2], f[3]}
end

local function putX(host, x)
  if x[1] == 0 and x[2] == '0' and x[3] == '0' then
    hdel(K_hosts, 'x|' .. host)
  else
    hset(K_hosts, 'x|' .. host, I(x[1]) .. ' ' .. x[2] .. ' ' .. x[3])
  end
end

local function isRejected(p)
  return hget(K_health, p) == 'R'
end

-- hostLearn updates host's x|, y| and r| from the outcome o of an attempt
-- through proxy p; ra is its Retry-After in µs (0 none), hadBans the
-- lease's flag.
local function hostLearn(p, host, o, now, ra, hadBans)
  if o == BANNED then
    local key = 'y|' .. host
    local v = hget(K_hosts, key)
    local hs = {}
    if v then hs = split(v, ' ') end
    local known = false
    for _, q in ipairs(hs) do if q == p then known = true end end
    if not known then hs[#hs + 1] = p end
    local n = 0
    for _, q in ipairs(hs) do if not isRejected(q) then n = n + 1 end end
    local usable = num(hget(K_E, 'nprox'), 0) - num(hget(K_E, 'nrej'), 0)
    local x = getX(host)
    if n > 0 and n >= usable then
      hdel(K_hosts, key)
      x[2], x[3] = I(n), '0'
    else
      hset(K_hosts, key, table.concat(hs, ' '))
      x[3] = '1'
    end
    putX(host, x)
  elseif o == SUCCESS and hadBans then
    local key = 'y|' .. host
    local v = hget(K_hosts, key)
    if not v then return end
    local hs, kept = split(v, ' '), {}
    for _, q in ipairs(hs) do if q ~= p then kept[#kept + 1] = q end end
    if #kept == #hs then return end
    if #kept == 0 then
      hdel(K_hosts, key)
      local x = getX(host)
      x[3] = '0'
      putX(host, x)
    else
      hset(K_hosts, key, table.concat(kept, ' '))
    end
  elseif o == PUSHBACK and ra > 0 and RAMAX > 0 then
    local key = 'r|' .. host
    local v = hget(K_hosts, key)
    local f, out = {}, {}
    if v then f = split(v, ' ') end
    for i = 1, #f - 2, 3 do -- the recent answers through other proxies
      if f[i] ~= p and now - tonumber(f[i + 1]) < RAWIN then
        out[#out + 1] = f[i] .. ' ' .. f[i + 1] .. ' ' .. f[i + 2]
      end
    end
    local untilUs = now + math.min(ra, RAMAX)
    out[#out + 1] = p .. ' ' .. I(now) .. ' ' .. I(untilUs)
    hset(K_hosts, key, table.concat(out, ' '))
    if #out >= 2 then
      local x = getX(host)
      if untilUs > x[1] then
        x[1] = untilUs
        putX(host, x)
      end
    end
  end
end

-- hostIdle schedules host h's state for sweeping once it says nothing:
-- its host rate's TAT (t|), its pushback pairs (q|), its recent
-- Retry-Afters (r|) and what holds it as a whole (x|). A host with none of
-- these, as most of a crawl's many hosts, has nothing to sweep and is not
-- scheduled: a release that leaves a host idle costs no command for it.
local function hostIdle(h, now)
  if hostT <= 0 and not (pushBase > 0 and hget(K_hosts, 'q|' .. h)) and not (RAMAX > 0 and hget(K_hosts, 'r|' .. h))
      and not hget(K_hosts, 'x|' .. h) then
    return
  end
  local forget = math.max(pushMax, pushBase)
  if RAMAX > 0 then forget = math.max(forget, RAWIN) end
  redis.call('ZADD', K_hexp, F(now + hostTau + 2 * forget + 1000000), h)
end

-- epoch returns the namespace's epoch id and the end of its grace, or nil.
local function epoch()
  local v = hget(K_E, 'epoch')
  if not v then return nil, 0 end
  if v ~= epochV then
    local f = split(v, ' ')
    epochV, epochId, epochGrace = v, f[1], tonumber(f[2])
  end
  return epochId, epochGrace
end

-- keepCfg lets the call use the budgets' configs kept from the calls
-- before it of the same epoch of its namespace (eid): they are the same
-- until the namespace is set up again, with a new epoch. At most 4096 are
-- kept, so that the collector has little more to look at.
local function keepCfg(eid)
  local g = K_st .. ' ' .. eid
  if g ~= cfgKeptFor or cfgKeptN > 4096 then
    cfgKept, cfgKeptFor, cfgKeptN = {}, g, 0
  end
  cfgCache = cfgKept
end

-- wanted (see begin) is whether some process waits for a release (K_E
-- want, until when), read by the first drop of a call, which tells them
-- then; nil before.

-- drop removes lease id, whose info is info (false: not known; a string,
-- or already split at its newlines), gives back
-- its counts and learns from outcome o and its Retry-After ra (µs, 0
-- none). It returns false when the lease was not held, else the event or
-- true.
local function drop(id, info, o, now, ra)
  if redis.call('ZREM', K_leases, id) == 0 then return false end
  hdel(K_linfo, id)
  if not info then return true end
  local f = info
  if type(f) == 'string' then f = split(f, '\n') end
  local p, b, host, probe, granted, paired = f[1], f[2], f[3], f[4] == '1', tonumber(f[5]), f[6] == '1'
  hostLearn(p, host, o, now, ra or 0, f[7] == '1')
  local c = bcfg(b)
  local bin = hincr(K_bin, b, -1)
  if bin <= 0 then hdel(K_bin, b) end
  local pin = bin -- a proxy alone in its budget keeps no counts of its own
  if not c.only then
    pin = hincr(K_pin, p, -1)
    if pin <= 0 then hdel(K_pin, p) end
  end
  local hi = 'i|' .. host
  local idle = hincr(K_hosts, hi, -1) <= 0
  if idle then hdel(K_hosts, hi) end
  local pair = nil
  if paired then
    local key = 'p|' .. p .. '|' .. host
    pair = getPair(key)
    if pair then pair.inflight = pair.inflight - 1; putPair(key, pair) end
  end
  local ev, av = learn(p, b, c, host, o, now, granted, probe, pin + 1, paired, pair)
  if idle then hostIdle(host, now) end -- after learn, which may have given it pushback state
  psync(p, c, av, nil, math.max(pin, 0))
  bsync(b, c, math.max(bin, 0))
  if wanted == nil then -- once a script: a call that gives back several leases wakes the waiting once
    wanted = num(hget(K_E, 'want'), 0) > now
    if wanted then redis.call('PUBLISH', chan, '1') end
  end
  return ev or true
end

-- drops drops the leases ids, with outcomes os and Retry-Afters ras (nil:
-- 0 each), and returns drop's result for each. hints (nil: none) are
-- their proxies, budgets and hosts, {p, b, host} each, as the process
-- knows them: what the drops read is then read in one HMGET, with their
-- infos; else, or when a hint is wrong, in a second.
local function drops(ids, os, ras, now, hints)
  local fs = {K_E .. 'want', K_E .. 'epoch'}
  for i, id in ipairs(ids) do
    fs[#fs + 1] = K_linfo .. id
    local h = hints and hints[i]
    if h then leaseFields(fs, h[1], h[2], h[3]) end
  end
  prefetch(fs)
  local eid = epoch()
  if eid then keepCfg(eid) end
  fs = {}
  local infos = {}
  for i, id in ipairs(ids) do
    local info = hget(K_linfo, id)
    if info then
      local f = split(info, '\n')
      infos[i] = f
      local h = hints and hints[i]
      if not (h and h[1] == f[1] and h[2] == f[2] and h[3] == f[3]) then leaseFields(fs, f[1], f[2], f[3]) end
    end
  end
  prefetch(fs)
  local out = {}
  for i, id in ipairs(ids) do
    out[i] = drop(id, infos[i] or false, os and os[i] or 0, now, ras and ras[i] or 0)
  end
  return out
end

-- sweepLeases drops the expired leases (up to sweepK) and returns how
-- many it dropped. An acquire that would be told to wait runs it first
-- (see acquire.lua), so a permit an expired lease holds is never waited
-- for.
local function sweepLeases(now)
  local ids = redis.call('ZRANGEBYSCORE', K_leases, '-inf', I(now), 'LIMIT', 0, sweepK)
  if #ids > 0 then drops(ids, nil, nil, now) end
  return #ids
end

-- sweeps runs the sweeps when due (K_E sweep, µs): at most every SWEEP, at
-- the end of a bench, and at once again while one leaves work for another.
-- Each is a command or more, and an acquire has a dozen: one on every
-- acquire would be a fifth of the cost of an attempt. It returns whether
-- they ran.
local function sweeps(now)
  local due = hget(K_E, 'sweep')
  if due and tonumber(due) > now then return false end
  local nids = sweepLeases(now)
  local hs = redis.call('ZRANGEBYSCORE', K_hexp, '-inf', I(now), 'LIMIT', 0, sweepK)
  for _, h in ipairs(hs) do
    redis.call('ZREM', K_hexp, h)
    if not hget(K_hosts, 'i|' .. h) then
      local q = hget(K_hosts, 'q|' .. h)
      if q then
        for _, p in ipairs(split(q, ' ')) do hdel(K_hosts, 'p|' .. p .. '|' .. h) end
      end
      hdel(K_hosts, 't|' .. h); hdel(K_hosts, 'q|' .. h); hdel(K_hosts, 'r|' .. h)
      local x = hget(K_hosts, 'x|' .. h)
      if x then
        local f = split(x, ' ')
        if tonumber(f[1]) <= now and f[2] == '0' and f[3] == '0' then hdel(K_hosts, 'x|' .. h) end
      end
    end
  end
  -- benches that are over: their proxies are probing, a probe may go to them
  local ps = redis.call('ZRANGEBYSCORE', K_bench, '-inf', I(now), 'LIMIT', 0, sweepK)
  for _, p in ipairs(ps) do
    redis.call('ZREM', K_bench, p)
    local b, pi = pcfg(p)
    local c = bcfg(b)
    local av = hget(K_probe, p) ~= '1'
    if av then avail(b, c, 1) end
    psync(p, c, av, nil, nil, pi)
    bsync(b, c)
  end
  local nxt = now + SWEEP
  if nids >= sweepK or #hs >= sweepK or #ps >= sweepK then
    nxt = now
  else
    local first = redis.call('ZRANGEBYSCORE', K_bench, '(' .. I(now), '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
    if first[2] then nxt = math.min(nxt, tonumber(first[2])) end
  end
  hset(K_E, 'sweep', I(nxt))
  return true
end
