#!/usr/bin/env bash
# Make a Docker engine and a `debian:bookworm-slim` base image available on a Debian machine.
#
# - uses a running engine if there is one;
# - otherwise installs docker.io (apt) and starts dockerd in the background, cleaning up what an
#   unclean kill leaves behind (stale pid files, dead containerd sockets);
# - then makes sure `debian:bookworm-slim` exists: pull, or where no registry is reachable build it
#   with debootstrap and `docker import`.
# Idempotent and quick when already done.  Needs root for the install/start parts.
set -euo pipefail

BASE_IMAGE="${ENVCTL_BASE_IMAGE:-debian:bookworm-slim}"
DOCKERD_LOG="${DOCKERD_LOG:-/var/log/envctl-dockerd.log}"
WAIT_SECONDS="${DOCKER_WAIT_SECONDS:-60}"

say() { printf '[docker-engine] %s\n' "$*" >&2; }
die() { printf '[docker-engine] error: %s\n' "$*" >&2; exit 1; }

engine_up() { docker info >/dev/null 2>&1; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    die "need root to run '$*' (run this script as root or install sudo)"; fi
}

apt_install() {
  local missing=()
  for pkg in "$@"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  say "installing ${missing[*]} (apt)"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

start_dockerd() {
  command -v dockerd >/dev/null 2>&1 || apt_install docker.io
  # What an unclean kill leaves: pid files of dead daemons and sockets nobody listens on.
  for pidfile in /var/run/docker.pid /run/docker.pid /var/run/docker/containerd/containerd.pid; do
    if [ -f "$pidfile" ] && ! kill -0 "$(cat "$pidfile" 2>/dev/null)" 2>/dev/null; then
      say "removing stale $pidfile"; as_root rm -f "$pidfile"
    fi
  done
  if ! pgrep -x dockerd >/dev/null 2>&1; then
    pgrep -x containerd >/dev/null 2>&1 || as_root rm -f /var/run/docker/containerd/containerd.sock /run/containerd/containerd.sock
    as_root rm -f /var/run/docker.sock
    say "starting dockerd (log: $DOCKERD_LOG)"
    as_root sh -c "nohup dockerd --storage-driver=overlay2 >>'$DOCKERD_LOG' 2>&1 &"
  fi
  local waited=0
  until engine_up; do
    sleep 1; waited=$((waited + 1))
    if [ "$waited" -ge "$WAIT_SECONDS" ]; then
      tail -n 20 "$DOCKERD_LOG" >&2 || true
      die "dockerd did not answer within ${WAIT_SECONDS}s; see $DOCKERD_LOG"
    fi
  done
  say "engine ready after ${waited}s"
}

ensure_base_image() {
  docker image inspect "$BASE_IMAGE" >/dev/null 2>&1 && return 0
  say "pulling $BASE_IMAGE"
  if timeout 60 docker pull -q "$BASE_IMAGE" >/dev/null 2>&1; then return 0; fi
  say "no registry reachable; building $BASE_IMAGE with debootstrap"
  command -v debootstrap >/dev/null 2>&1 || apt_install debootstrap
  local root
  root="$(mktemp -d /tmp/envctl-rootfs.XXXXXX)"
  trap 'as_root rm -rf "$root"' RETURN
  local mirror="${DEBIAN_MIRROR:-}"
  if [ -z "$mirror" ]; then
    # Use the mirror this machine's apt already reaches.
    mirror="$(grep -rhE '^(URIs:|deb )' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null \
               | grep -oE 'https?://[^ ]+/debian/?$|https?://[^ ]+/debian/? ' | tr -d ' ' | head -n1 || true)"
    mirror="${mirror:-http://deb.debian.org/debian}"
  fi
  as_root debootstrap --variant=minbase bookworm "$root" "$mirror" >/tmp/envctl-debootstrap.log 2>&1 \
    || { tail -n 20 /tmp/envctl-debootstrap.log >&2; die "debootstrap failed; see /tmp/envctl-debootstrap.log"; }
  # Slim it the way the official -slim image is: no apt lists, docs or caches.
  as_root rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/usr/share/doc/* "$root"/usr/share/man/*
  as_root sh -c "printf 'deb %s bookworm main\ndeb %s bookworm-updates main\n' '$mirror' '$mirror' > '$root/etc/apt/sources.list'"
  as_root tar -C "$root" -c . | docker import --change 'CMD ["bash"]' - "$BASE_IMAGE" >/dev/null
  say "built $BASE_IMAGE"
}

if engine_up; then say "engine already running"; else start_dockerd; fi
ensure_base_image
docker run --rm "$BASE_IMAGE" true
say "ok: $(docker version --format '{{.Server.Version}}') with $BASE_IMAGE"
