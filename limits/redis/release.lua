-- release: ARGV after the header: triples of lease id, outcome and
-- Retry-After (µs, 0 none), one for each lease a call gives back (see
-- releases in release.go). Each lease
-- is ZREMmed and its counts given back only if that removed it, so a second
-- release is harmless. Returns three values for each triple: 'gone', '', '';
-- 'ok', '', ''; or 'ok', state, cooldown µs for a health change.
local function release()
  local now = nowUs()
  local ids, os, ras = {}, {}, {}
  for i = H + 1, #ARGV - 2, 3 do
    ids[#ids + 1], os[#os + 1], ras[#ras + 1] = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  end
  local rs = drops(ids, os, ras, now)
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
