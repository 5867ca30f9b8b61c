#!/bin/sh
# Run kiwix-serve like ghcr.io/kiwix/kiwix-serve does: bare ZIM file names (relative to /data) are
# served on port 80; any other command (e.g. "kiwix-serve --port 80 /data/x.zim") runs as given.
#
# /data is where the catalog mounts {data_dir}/wikipedia on every flavor. When the book is not there
# (a new data directory, or no mount at all), the image's own small ZIM is copied in first, under a
# temporary name renamed into place: copies starting side by side on one data directory each see either
# no file or a whole one. 'cp -p' keeps the image's mtime, so the site's fingerprint (stat) is the same.
set -e
BOOK=wikipedia_en_all_maxi_2022-05.zim
SEED=/usr/share/envctl/seed/data/$BOOK
if [ ! -e "/data/$BOOK" ]; then
  tmp="/data/.envctl-seed.$$.$BOOK"
  if ! cp -p "$SEED" "$tmp" 2>/dev/null || ! mv -f "$tmp" "/data/$BOOK"; then
    rm -f "$tmp" 2>/dev/null || true
    echo "kiwix: /data/$BOOK is missing and cannot be written (is /data mounted read-only?); mount a writable directory or put the ZIM there" >&2
    exit 1
  fi
fi
case "$1" in
  *.zim) exec kiwix-serve --port "${PORT:-80}" "$@" ;;
  "") exec kiwix-serve --port "${PORT:-80}" "/data/$BOOK" ;;
  *) exec "$@" ;;
esac
