#!/bin/sh
# Install poppler-utils (pdftoppm: renders report pages to PNG for the report tests) if it is missing.
# Idempotent: exits 0 at once when pdftoppm is already on PATH. Needs root (or sudo) and apt-get.
set -eu
command -v pdftoppm >/dev/null 2>&1 && exit 0
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
command -v apt-get >/dev/null 2>&1 || { echo "install-poppler.sh: no apt-get; install poppler-utils by hand" >&2; exit 1; }
# A fresh container has empty package lists: update once, then install without recommends (small).
$SUDO apt-get update -qq >/dev/null
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends poppler-utils >/dev/null
command -v pdftoppm >/dev/null 2>&1
