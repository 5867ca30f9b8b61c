#!/bin/sh
# Image build step: start MariaDB, create magentodb + magentouser, seed it, shut MariaDB down cleanly.
set -eu
install -d -o mysql -g mysql /run/mysqld
mariadbd --user=mysql --skip-log-bin &  # the seed is the image: nothing to log
pid=$!
i=0
until mariadb-admin ping --silent 2>/dev/null; do
    i=$((i + 1)); kill -0 "$pid" && [ "$i" -lt 300 ] || { echo "mariadb did not start" >&2; exit 1; }
    sleep 0.1
done
mariadb <<'SQL'
CREATE DATABASE magentodb CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci;
CREATE USER 'magentouser'@'localhost' IDENTIFIED BY 'MyPassword';
CREATE USER 'magentouser'@'127.0.0.1' IDENTIFIED BY 'MyPassword';
GRANT ALL PRIVILEGES ON magentodb.* TO 'magentouser'@'localhost';
GRANT ALL PRIVILEGES ON magentodb.* TO 'magentouser'@'127.0.0.1';
SQL
python3 -m sites.magento_seed
mariadb-admin shutdown
wait "$pid" || true
