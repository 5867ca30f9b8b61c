#!/usr/bin/env bash
# Debian packages envctl's tests and demo need besides the Docker engine (scripts/docker-engine.sh):
# chromium (login state, smoke suite), openssh-client (Ansible over SSH), iproute2 (ss: who holds a port),
# docker-registry (a local registry: the registry pull path is tested for real).
# Idempotent and quick when everything is there.
set -euo pipefail
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v ssh >/dev/null 2>&1 || need+=(openssh-client)
command -v ss >/dev/null 2>&1 || need+=(iproute2)
[ -x /usr/bin/docker-registry ] || need+=(docker-registry)  # a real local registry for the pull-path tests
command -v python3 >/dev/null 2>&1 || need+=(python3 python3-venv)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need+=(python3-venv)
[ ${#need[@]} -eq 0 ] && exit 0
echo "[system-deps] installing ${need[*]}" >&2
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
