-- Hold requests on a public port while envctl restores a site's database in place. While the port is
-- listed in /etc/envctl/hold.map (set through the runtime API: 'add map' / 'del map'), with a deadline
-- (Unix time) as its value, a request waits here instead of reaching a copy that would answer an error.
-- The deadline bounds the wait even if the envctl process that set the hold is killed.
local holds = Map.new("/etc/envctl/hold.map", Map._str)

core.register_action("envctl_hold", { "http-req" }, function(txn)
  local port = tostring(txn.f:dst_port())
  while true do
    local deadline = tonumber(holds:lookup(port) or "")
    if deadline == nil or core.now().sec >= deadline then
      return
    end
    core.msleep(20)
  end
end)
