#!/bin/sh
# Start HAProxy (master-worker) on the config envctl rendered. The config and the routing table live in
# /etc/envctl inside this container: a new proxy is given both in its environment (base64) and writes
# them there once; afterwards envctl rewrites them through the control service (control.lua), so a
# restarted proxy (engine restart, 'docker restart') starts on the table as it last was.
# admin.sock is the worker's runtime API (routes), master.sock the master's CLI (reloads); both are
# reached only from inside (through the control service). Stale sockets of a killed proxy go first.
set -eu
d=/etc/envctl
mkdir -p "$d"
chmod 0700 "$d"
if [ ! -s "$d/haproxy.cfg" ]; then
    printf '%s' "${ENVCTL_PROXY_STATE:-}" | base64 -d > "$d/.state.json.new"
    printf '%s' "${ENVCTL_PROXY_CONFIG:?the proxy needs its config}" | base64 -d > "$d/.haproxy.cfg.new"
    mv "$d/.state.json.new" "$d/state.json"
    mv "$d/.haproxy.cfg.new" "$d/haproxy.cfg"
fi
rm -f "$d/admin.sock" "$d/master.sock"
: >> "$d/hold.map"
exec haproxy -W -db -S "$d/master.sock,mode,600" -f "$d/haproxy.cfg"
