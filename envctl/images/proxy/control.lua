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

-- How many answers HAProxy's CLI gives to ``cmd``: one per command, commands being the non-empty lines and, within a
-- line, the parts between unescaped ';'. Each answer ends with an empty line (the CLI's own end-of-answer mark).
local function answers(cmd)
  local n = 0
  for line in cmd:gmatch("[^\n]+") do
    if line:find("%S") then
      n = n + 1
      local escaped = false
      for c in line:gmatch(".") do
        if c == ";" and not escaped then n = n + 1 end
        escaped = (c == "\\") and not escaped
      end
    end
  end
  return n
end

-- one command (';'-separated commands) to a CLI socket; the answer, read until the CLI's end-of-answer mark (an
-- empty line after each command's answer) rather than until the CLI closes the connection: when an answer ends
-- exactly at a buffer's edge (HAProxy 2.6, a 16 kB 'show stat' of a whole instance), the close never reaches a
-- Lua socket and the read would wait for its timeout. For the master's CLI (which may keep the connection), until
-- the line that ends its answer.
local function ask(sock, cmd, stop)
  local s = core.tcp()
  s:settimeout(10)
  local ok, err = s:connect("unix@" .. DIR .. sock)
  if not ok then return nil, "connect " .. sock .. ": " .. tostring(err) end
  s:send(cmd .. "\n")
  local want = stop == nil and answers(cmd) or 0
  local out, ends = {}, 0
  while true do
    local line, rerr = s:receive("*l")
    if line == nil then
      if rerr == "timeout" and want > 0 and ends < want then  -- an answer cut off: say so, never pass half of it
        s:close()
        return nil, "HAProxy's CLI stopped answering '" .. cmd:sub(1, 80) .. "' after 10s (" .. ends .. " of " ..
                    want .. " answers)"
      end
      break
    end
    out[#out + 1] = line
    if stop ~= nil and line:find(stop, 1, true) == 1 then break end
    if line == "" then
      ends = ends + 1
      if want > 0 and ends >= want then break end
    end
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
