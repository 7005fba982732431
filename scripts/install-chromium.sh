#!/bin/sh
# Install Debian's chromium (headless screenshots of the MLflow UI in the report tests) if it is missing.
# Idempotent: exits 0 at once when chromium is already on PATH. Needs root (or sudo) and apt-get.
set -eu
command -v chromium >/dev/null 2>&1 && exit 0
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
command -v apt-get >/dev/null 2>&1 || { echo "install-chromium.sh: no apt-get; install chromium by hand" >&2; exit 1; }
$SUDO apt-get update -qq >/dev/null
# fonts-liberation: without a font package the UI renders as boxes in screenshots.
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium fonts-liberation >/dev/null
command -v chromium >/dev/null 2>&1
