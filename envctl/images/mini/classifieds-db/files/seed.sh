#!/bin/sh
# seed.sh CMD...: copy each file of the image's seed tree (/usr/share/envctl/seed/<path>) to /<path> when
# nothing is there, then run CMD. /docker-entrypoint-initdb.d is where the catalog mounts the site's
# {data_dir}/classifieds/mysql on every flavor (upstream: the SQL dump of classifieds_docker_compose.zip);
# an empty one gets this image's own dump. Each copy is made under a temporary name and renamed, so
# containers starting side by side on one data directory each see no file or a whole one; 'cp -p' keeps
# the image's mtime. A path that cannot be written (a read-only mount) is left as it is.
set -eu
SEED=/usr/share/envctl/seed
(cd "$SEED" && find . -type f) | while IFS= read -r f; do
  dest="/${f#./}"
  [ -e "$dest" ] && continue
  tmp="$(dirname "$dest")/.envctl-seed.$$.$(basename "$dest")"
  if ! { mkdir -p "$(dirname "$dest")" && cp -p "$SEED/${f#./}" "$tmp" && mv -f "$tmp" "$dest"; } 2>/dev/null; then
    rm -f "$tmp" 2>/dev/null || true
    echo "seed: $dest is missing and cannot be written" >&2
  fi
done
exec "$@"
