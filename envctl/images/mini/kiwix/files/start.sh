#!/bin/sh
# Run kiwix-serve like ghcr.io/kiwix/kiwix-serve does: bare ZIM file names (relative to /data) are
# served on port 80; any other command (e.g. "kiwix-serve --port 80 /data/x.zim") runs as given.
set -e
case "$1" in
  *.zim) exec kiwix-serve --port "${PORT:-80}" "$@" ;;
  "") exec kiwix-serve --port "${PORT:-80}" /data/wikipedia_en_all_maxi_2022-05.zim ;;
  *) exec "$@" ;;
esac
