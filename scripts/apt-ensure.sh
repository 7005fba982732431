#!/bin/sh
# Make COMMAND available by installing Debian PACKAGES when it is missing (the outside tools tests use).
#   scripts/apt-ensure.sh COMMAND PACKAGE [PACKAGE ...]
# Idempotent: exits 0 at once when COMMAND is already on PATH; otherwise scripts/apt-install.sh installs
# the packages (one apt-get at a time), and the script fails unless COMMAND is then on PATH.
set -eu
[ $# -ge 2 ] || { echo "usage: $0 COMMAND PACKAGE [PACKAGE ...]" >&2; exit 2; }
tool=$1
shift
command -v "$tool" >/dev/null 2>&1 && exit 0
SCALERL_APT_CHECK="$tool" sh "$(dirname "$0")/apt-install.sh" "$@"  # skipped if installed while it waited
command -v "$tool" >/dev/null 2>&1 || { echo "apt-ensure.sh: installed $* but $tool is still not on PATH" >&2; exit 1; }
