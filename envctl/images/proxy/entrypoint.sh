#!/bin/sh
# Start HAProxy (master-worker) on the config envctl rendered into the bind-mounted control directory.
# admin.sock is the worker's runtime API (routes); master.sock the master's CLI, where envctl asks for a
# reload (a command the master reads once it is ready, where a signal sent too early is lost). Stale
# sockets left by a killed proxy are removed first (HAProxy would refuse to bind them).
set -eu
d=/run/envctl
i=0
while [ ! -f "$d/haproxy.cfg" ] && [ "$i" -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
rm -f "$d/admin.sock" "$d/master.sock"
: >> "$d/hold.map"
exec haproxy -W -db -S "$d/master.sock,mode,600" -f "$d/haproxy.cfg"
