#!/bin/sh
# Render one page of a report PDF to PNG (for the README: docs/report-page.png).
#   scripts/report-page.sh runs/scalerl-loo-embedded/report.pdf 3 docs/report-page.png [DPI]
# Page 3 is the compute-performance curves; 2 the LOO table. DPI defaults to 110 (legible at 100% zoom).
set -eu
[ $# -ge 3 ] || { echo "usage: $0 REPORT.pdf PAGE OUT.png [DPI]" >&2; exit 2; }
pdf=$1 page=$2 out=$3 dpi=${4:-110}
sh "$(dirname "$0")/install-poppler.sh"
mkdir -p "$(dirname "$out")"
pdftoppm -f "$page" -l "$page" -r "$dpi" -png -singlefile "$pdf" "${out%.png}"
echo "$out"
