#!/bin/sh
# Install the test key, make fresh host keys, run sshd in the foreground.
set -eu
printf '%s\n' "${AUTHORIZED_KEY:?set AUTHORIZED_KEY to an ssh public key}" > /root/.ssh/authorized_keys
chmod 600 /root/.ssh/authorized_keys
ssh-keygen -A >/dev/null
# SSHD_PORT: the tests run hosts on the host's network (so envctl inside reaches the ports it
# publishes on 127.0.0.1), each sshd on its own port.
exec /usr/sbin/sshd -D -e -p "${SSHD_PORT:-22}"
