#!/bin/sh
# Entrypoint of the slim rehearsal's replicas (scripts/rehearse.py --flavor slim): webarena-verified's
# shape over a mini image. env-ctrl (the stand-in, env_ctrl.py) serves on $WA_ENV_CTRL_PORT unless
# WA_ENV_CTRL_ENABLE=false; then the mini image's own entrypoint and command run as PID 1.
# Wikipedia: like upstream's entrypoint, the first argument (a ZIM file) overrides $WA_ENV_CTRL_ZIM_FILE
# and kiwix-serve listens on $WA_ENV_CTRL_KIWIX_PORT (default 8080).
set -e
python3 /usr/local/lib/wa-env-ctrl/env_ctrl.py serve >/tmp/wa-env-ctrl.log 2>&1 &
if [ "$WA_ENV_CTRL_TYPE" = wikipedia ]; then
  # "$@" is the mini image's entrypoint (start.sh: seeds the ZIM when missing), then the site's arguments
  seed="$1"; shift
  zim="${1:-$WA_ENV_CTRL_ZIM_FILE}"
  exec "$seed" kiwix-serve --port "${WA_ENV_CTRL_KIWIX_PORT:-8080}" "$zim"
fi
exec "$@"
