-- release: ARGV after the header: lease id, outcome. ZREM the lease and give
-- its counts back only if that removed it, so a second release is harmless.
-- Returns {'gone'}, {'ok'} or {'ok', state, cooldown µs} for a health change.
local now = nowUs()
local r = drop(ARGV[H + 1], tonumber(ARGV[H + 2]), now)
if r == false then return {'gone'} end
if r == true then return {'ok'} end
return {'ok', r[1], r[2]}
