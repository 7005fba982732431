#!/bin/sh
# Install bubblewrap (bwrap: the sandbox's namespaces and minimal file system, recipe/sandbox) if it is missing.
exec sh "$(dirname "$0")/apt-ensure.sh" bwrap bubblewrap
