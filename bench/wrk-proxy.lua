-- bench/wrk-proxy.lua: makes wrk a client of a forward proxy. wrk connects
-- to the URL on its command line (the proxy) and sends every request in
-- absolute form for the URL in WRK_TARGET, as a proxy client does:
--
--   WRK_TARGET=http://127.0.0.1:8080/1k wrk -s bench/wrk-proxy.lua http://127.0.0.1:3128/
local target = os.getenv("WRK_TARGET")
if target == nil or target == "" then
  error("wrk-proxy.lua: set WRK_TARGET to the URL to ask the proxy for")
end
local hostport = target:match("^%a+://([^/]+)")
if hostport == nil then
  error("wrk-proxy.lua: WRK_TARGET is not an absolute URL: " .. target)
end
wrk.path = target
wrk.headers["Host"] = hostport
