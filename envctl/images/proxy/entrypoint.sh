#!/bin/sh
# Start HAProxy on the config envctl rendered into the bind-mounted control directory. A stale
# control socket left by a killed proxy is removed first (HAProxy would refuse to bind it).
set -eu
d=/run/envctl
i=0
while [ ! -f "$d/haproxy.cfg" ] && [ "$i" -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
rm -f "$d/admin.sock"
: >> "$d/hold.map"
exec haproxy -W -db -f "$d/haproxy.cfg"
