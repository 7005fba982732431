#!/bin/sh
# Install poppler-utils (pdftoppm: renders report pages to PNG for the report tests) if it is missing.
exec sh "$(dirname "$0")/apt-ensure.sh" pdftoppm poppler-utils
