#!/bin/sh
# Install Debian PACKAGES with apt-get, one apt-get at a time across processes.
#   scripts/apt-install.sh PACKAGE [PACKAGE ...]
# `make test` runs tests in parallel processes, and a second apt-get fails on apt's own locks instead of
# waiting, so every install here queues on one lock file ($SCALERL_APT_LOCK, default
# /tmp/scalerl-apt-install.lock; not the /tmp/scalerl-apt.lock of earlier versions, which a munged they started
# may still hold on a machine kept between runs). SCALERL_APT_CHECK=COMMAND: skip the install when COMMAND is on
# PATH once the lock is held (another process installed it meanwhile). Needs root (or sudo) and apt-get.
# The lock is released when this script exits.
set -eu
[ $# -ge 1 ] || { echo "usage: $0 PACKAGE [PACKAGE ...]" >&2; exit 2; }
LOCK=${SCALERL_APT_LOCK:-/tmp/scalerl-apt-install.lock}
WAIT=${SCALERL_APT_WAIT:-600}
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
command -v apt-get >/dev/null 2>&1 || { echo "apt-install.sh: no apt-get; install $* by hand" >&2; exit 1; }
exec 9>"$LOCK"
if ! flock -w "$WAIT" 9; then
    echo "apt-install.sh: waited ${WAIT} s for $LOCK (another install holds it); not installing $*" >&2
    exit 1
fi
if [ -n "${SCALERL_APT_CHECK:-}" ] && command -v "$SCALERL_APT_CHECK" >/dev/null 2>&1; then
    exit 0
fi
# apt-get runs with the lock's descriptor closed (9>&-): a package's post-install script may start a
# daemon (munge's starts munged), and a daemon that inherits the descriptor holds the lock for as long as
# it lives, so every later install would wait on it. (CI, 2026-11-28: munged, started with the
# descriptor open, held it through the SLURM tests; poppler and chromium waited 600 s and failed.)
# DPkg::Lock::Timeout: wait for dpkg's own lock too (an installer outside this queue: unattended-upgrades,
# or one of ours killed while dpkg still ran) instead of failing at once.
$SUDO apt-get -o DPkg::Lock::Timeout="$WAIT" update -qq >/dev/null 9>&-
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout="$WAIT" install -y -qq \
    --no-install-recommends "$@" >/dev/null 9>&-
