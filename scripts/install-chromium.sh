#!/bin/sh
# Install Debian's chromium (headless screenshots of the MLflow UI in the report tests) if it is missing.
# fonts-liberation: without a font package the UI renders as boxes in screenshots.
exec sh "$(dirname "$0")/apt-ensure.sh" chromium chromium fonts-liberation
