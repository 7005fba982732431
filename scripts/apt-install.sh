#!/bin/sh
# Install Debian PACKAGES with apt-get, one apt-get at a time across processes.
#   scripts/apt-install.sh PACKAGE [PACKAGE ...]
# `make test` runs tests in parallel processes, and a second apt-get fails on apt's own locks instead of
# waiting, so every install here queues on one lock file ($SCALERL_APT_LOCK, default /tmp/scalerl-apt.lock).
# Needs root (or sudo) and apt-get. The lock is released when this script exits.
set -eu
[ $# -ge 1 ] || { echo "usage: $0 PACKAGE [PACKAGE ...]" >&2; exit 2; }
LOCK=${SCALERL_APT_LOCK:-/tmp/scalerl-apt.lock}
WAIT=${SCALERL_APT_WAIT:-600}
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
command -v apt-get >/dev/null 2>&1 || { echo "apt-install.sh: no apt-get; install $* by hand" >&2; exit 1; }
exec 9>"$LOCK"
if ! flock -w "$WAIT" 9; then
    echo "apt-install.sh: waited ${WAIT} s for $LOCK (another install holds it); not installing $*" >&2
    exit 1
fi
# apt-get runs with the lock's descriptor closed (9>&-): a package's post-install script may start a
# daemon (munge's starts munged), and a daemon that inherits the descriptor holds the lock for as long as
# it lives, so every later install would wait on it. (CI, 2026-11-28: munged, started with the
# descriptor open, held it through the SLURM tests; poppler and chromium waited 600 s and failed.)
$SUDO apt-get update -qq >/dev/null 9>&-
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null 9>&-
