#!/bin/sh
# The official postgres image's entrypoint, in short: on an empty $PGDATA, initdb as $POSTGRES_USER,
# allow remote clients (POSTGRES_HOST_AUTH_METHOD, else scram-sha-256 with POSTGRES_PASSWORD),
# create $POSTGRES_DB, run /docker-entrypoint-initdb.d/*; then exec postgres as PID 1.
set -eu

# `docker run IMAGE -c foo=bar` passes options to postgres, as upstream.
case "${1:-}" in -*) set -- postgres "$@" ;; esac

if [ "${1:-}" != postgres ]; then
    exec "$@"
fi

: "${PGDATA:=/var/lib/postgresql/data}"
export PGDATA

if [ "$(id -u)" = 0 ]; then
    mkdir -p "$PGDATA" /var/run/postgresql
    chmod 00700 "$PGDATA" || :
    chmod 03777 /var/run/postgresql
    find "$PGDATA" \! -user postgres -exec chown postgres:postgres '{}' +
    chown postgres:postgres /var/run/postgresql
    exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi

POSTGRES_USER="${POSTGRES_USER:-postgres}"
POSTGRES_DB="${POSTGRES_DB:-$POSTGRES_USER}"
POSTGRES_PASSWORD="${POSTGRES_PASSWORD:-}"

if [ ! -s "$PGDATA/PG_VERSION" ]; then
    if [ -z "$POSTGRES_PASSWORD" ] && [ "${POSTGRES_HOST_AUTH_METHOD:-}" != trust ]; then
        echo "Error: Database is uninitialized and superuser password is not specified." >&2
        echo "       Set POSTGRES_PASSWORD, or POSTGRES_HOST_AUTH_METHOD=trust to allow all connections without a password." >&2
        exit 1
    fi
    auth="${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}"
    pwfile=""
    if [ -n "$POSTGRES_PASSWORD" ]; then
        pwfile="$(mktemp)"
        printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
    fi
    # shellcheck disable=SC2086
    initdb --username="$POSTGRES_USER" ${pwfile:+--pwfile="$pwfile"} --auth-local=trust --auth-host="$auth" \
        ${POSTGRES_INITDB_ARGS:-}
    [ -z "$pwfile" ] || rm -f "$pwfile"
    printf "\nhost all all all %s\n" "$auth" >> "$PGDATA/pg_hba.conf"
    printf "\nlisten_addresses = '*'\njit = off\n" >> "$PGDATA/postgresql.conf"

    # A temporary server on the Unix socket only, for the setup steps.
    PGUSER="$POSTGRES_USER" pg_ctl -D "$PGDATA" -w -o "-c listen_addresses=''" start
    psql="psql -v ON_ERROR_STOP=1 --no-psqlrc --username=$POSTGRES_USER --no-password"
    if [ "$POSTGRES_DB" != postgres ]; then
        $psql --dbname=postgres --set db="$POSTGRES_DB" <<'SQL'
CREATE DATABASE :"db" ;
SQL
    fi
    for f in /docker-entrypoint-initdb.d/*; do
        case "$f" in
            *.sh) echo "$0: running $f"; if [ -x "$f" ]; then "$f"; else . "$f"; fi ;;
            *.sql) echo "$0: running $f"; $psql --dbname="$POSTGRES_DB" -f "$f" ;;
            *.sql.gz) echo "$0: running $f"; gunzip -c "$f" | $psql --dbname="$POSTGRES_DB" ;;
            */\*) ;;
            *) echo "$0: ignoring $f" ;;
        esac
    done
    pg_ctl -D "$PGDATA" -m fast -w stop
    echo
    echo "PostgreSQL init process complete; ready for start up."
    echo
fi

exec "$@"
