#!/bin/sh
# Build-time only: initialise the data directory, create root/password and the osclass database,
# load the populate script, and shut the server down cleanly so the layer holds a consistent datadir.
set -eu
mariadb-install-db --user=mysql --datadir=/var/lib/mysql --skip-test-db --auth-root-authentication-method=socket >/dev/null
mariadbd --user=mysql --skip-networking &
pid=$!
i=0
until mariadb-admin --user=root ping --silent 2>/dev/null; do
  i=$((i + 1)); [ "$i" -lt 300 ] || { echo "mariadbd did not start" >&2; exit 1; }
  sleep 0.1
done
mariadb --user=root <<'SQL'
ALTER USER 'root'@'localhost' IDENTIFIED VIA mysql_native_password USING PASSWORD('password') OR unix_socket;
CREATE USER 'root'@'%' IDENTIFIED BY 'password';
GRANT ALL PRIVILEGES ON *.* TO 'root'@'%' WITH GRANT OPTION;
CREATE DATABASE osclass CHARACTER SET utf8mb4;
FLUSH PRIVILEGES;
SQL
cd / && mariadb --user=root --password=password osclass -e 'source docker-entrypoint-initdb.d/osclass_craigslist.sql'
mariadb-admin --user=root --password=password shutdown
wait "$pid"
