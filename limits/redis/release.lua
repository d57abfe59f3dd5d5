-- release: ARGV after the header: six values for each lease a call gives
-- back (see releases in release.go): its id, outcome, Retry-After (µs, 0
-- none), and its proxy, budget and host as the process knows them ('' when
-- it does not), so that what the release reads is read in one HMGET. Each
-- lease is ZREMmed and its counts given back only if that removed it, so a
-- second release is harmless. Returns three values for each lease:
-- 'gone', '', ''; 'ok', '', ''; or 'ok', state, cooldown µs for a health
-- change.
local function release()
  local now = nowUs()
  local ids, os, ras, hints = {}, {}, {}, {}
  for i = H + 1, #ARGV - 5, 6 do
    local k = #ids + 1
    ids[k], os[k], ras[k] = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
    if ARGV[i + 3] ~= '' then hints[k] = {ARGV[i + 3], ARGV[i + 4], ARGV[i + 5]} end
  end
  local rs = drops(ids, os, ras, now, hints)
  local out = {}
  for _, r in ipairs(rs) do
    local n = #out
    if r == false then
      out[n + 1], out[n + 2], out[n + 3] = 'gone', '', ''
    elseif r == true then
      out[n + 1], out[n + 2], out[n + 3] = 'ok', '', ''
    else
      out[n + 1], out[n + 2], out[n + 3] = 'ok', r[1], r[2] or 0
    end
  end
  flush()
  return out
end
