#!/bin/sh
# Install the test key, make fresh host keys, run sshd in the foreground.
set -eu
printf '%s\n' "${AUTHORIZED_KEY:?set AUTHORIZED_KEY to an ssh public key}" > /root/.ssh/authorized_keys
chmod 600 /root/.ssh/authorized_keys
ssh-keygen -A >/dev/null
exec /usr/sbin/sshd -D -e
