-- envctl's control path into the proxy: an HTTP service on every public port, reached only by requests
-- that carry the proxy's token in X-Envctl-Control (the frontends check it; a wrong token is refused
-- before any site sees the request). It relays runtime-API commands to HAProxy's own admin socket,
-- reads and writes the few files the proxy restarts on, and passes a command to the master (reload).
-- Nothing here is reachable without the token, and nothing outside /etc/envctl can be named.
local DIR = "/etc/envctl/"
local FILES = { ["state.json"] = true, ["haproxy.cfg"] = true, ["hold.map"] = true }

local function body(applet)
  local want = tonumber(applet.headers["content-length"] and applet.headers["content-length"][0] or "0") or 0
  local parts, got = {}, 0
  while got < want do
    local chunk = applet:receive()
    if chunk == nil or chunk == "" then break end
    parts[#parts + 1] = chunk
    got = got + #chunk
  end
  return table.concat(parts)
end

-- one command (';'-separated commands) to a CLI socket; the answer until it closes, or, for the master's
-- CLI (which may keep the connection), until the line that ends the answer
local function ask(sock, cmd, stop)
  local s = core.tcp()
  s:settimeout(10)
  local ok, err = s:connect("unix@" .. DIR .. sock)
  if not ok then return nil, "connect " .. sock .. ": " .. tostring(err) end
  s:send(cmd .. "\n")
  local out = {}
  while true do
    local line = s:receive("*l")
    if line == nil then break end
    out[#out + 1] = line
    if stop ~= nil and line:find(stop, 1, true) == 1 then break end
  end
  s:close()
  return table.concat(out, "\n") .. "\n"
end

-- replace DIR/name by text: a temporary file renamed over it (a reader sees the old or the new one)
local function write(name, text)
  local tmp = DIR .. "." .. name .. ".tmp"
  local f, err = io.open(tmp, "w")
  if f == nil then return nil, tostring(err) end
  f:write(text)
  f:close()
  local ok, rerr = os.rename(tmp, DIR .. name)
  if not ok then return nil, tostring(rerr) end
  return true
end

local function reply(applet, status, text)
  applet:set_status(status)
  applet:add_header("content-type", "text/plain")
  applet:add_header("content-length", tostring(#text))
  applet:start_response()
  applet:send(text)
end

core.register_service("envctl_control", "http", function(applet)
  local path, data = applet.path, body(applet)
  if path == "/.envctl/ping" then
    return reply(applet, 200, "envctl-proxy\n")
  elseif path == "/.envctl/cmd" then
    local out, err = ask("admin.sock", data, nil)
    if out == nil then return reply(applet, 503, err) end
    return reply(applet, 200, out)
  elseif path == "/.envctl/master" then
    local out, err = ask("master.sock", data, "# programs")
    if out == nil then return reply(applet, 503, err) end
    return reply(applet, 200, out)
  end
  if path == "/.envctl/apply" then
    -- a route change in one request: "<len state> <len config>\n", the table, the config, then runtime-API
    -- commands; both files are replaced (each atomically), the commands run, the servers' state comes back
    local sl, cl, rest = data:match("^(%d+) (%d+)\n(.*)$")
    if sl == nil then return reply(applet, 400, "malformed apply\n") end
    sl, cl = tonumber(sl), tonumber(cl)
    local files = { { "state.json", rest:sub(1, sl) }, { "haproxy.cfg", rest:sub(sl + 1, sl + cl) } }
    local cmds = rest:sub(sl + cl + 1)
    for _, f in ipairs(files) do
      if #f[2] > 0 then
        local ok, err = write(f[1], f[2])
        if not ok then return reply(applet, 500, err) end
      end
    end
    if #cmds > 0 then
      local out, err = ask("admin.sock", cmds, nil)
      if out == nil then return reply(applet, 503, err) end
    end
    local out, err = ask("admin.sock", "show servers state", nil)
    if out == nil then return reply(applet, 503, err) end
    return reply(applet, 200, out)
  end
  local name = path:match("^/%.envctl/file/([%w._-]+)$")
  if name == nil or not FILES[name] then
    return reply(applet, 404, "no such control path\n")
  end
  if applet.method == "PUT" then
    local ok, err = write(name, data)
    if not ok then return reply(applet, 500, err) end
    return reply(applet, 200, "written\n")
  end
  local f = io.open(DIR .. name, "r")
  if f == nil then return reply(applet, 404, "no " .. name .. "\n") end
  local text = f:read("*a")
  f:close()
  return reply(applet, 200, text)
end)
