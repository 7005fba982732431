#!/bin/sh
# Make COMMAND available by installing Debian PACKAGES when it is missing (the outside tools tests use).
#   scripts/apt-ensure.sh COMMAND PACKAGE [PACKAGE ...]
# Idempotent: exits 0 at once when COMMAND is already on PATH. Needs root (or sudo) and apt-get.
set -eu
[ $# -ge 2 ] || { echo "usage: $0 COMMAND PACKAGE [PACKAGE ...]" >&2; exit 2; }
tool=$1
shift
command -v "$tool" >/dev/null 2>&1 && exit 0
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
command -v apt-get >/dev/null 2>&1 || { echo "apt-ensure.sh: no apt-get; install $* by hand for $tool" >&2; exit 1; }
# One apt-get at a time: `make test` runs tests in parallel processes, and a second apt-get fails on
# apt's locks instead of waiting. The lock is released when this script exits.
exec 9>/tmp/scalerl-apt.lock
flock 9
command -v "$tool" >/dev/null 2>&1 && exit 0  # another process installed it while this one waited
# A fresh container has empty package lists: update once, then install without recommends (small).
$SUDO apt-get update -qq >/dev/null
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null
command -v "$tool" >/dev/null 2>&1
