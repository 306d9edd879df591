#!/bin/sh
# Prints the suite's version, which the Makefile stamps into every binary:
# `git describe` against the newest v* tag (v1.2.3, v1.2.3-4-gabcdef012345),
# or v0.0.0-<commits>-g<hash> before the first tag, with -dirty when the
# tree has uncommitted changes. Prints nothing outside a git checkout; the
# binaries then report what the Go toolchain recorded.
#
# With --deb, prints the same as a Debian version (1.2.3+4.gabcdef012345),
# and 0.0.0 when nothing is known.
set -eu
cd "$(dirname "$0")/.."
v=
if git rev-parse --git-dir >/dev/null 2>&1; then
  git update-index -q --refresh >/dev/null 2>&1 || true
  v=$(git describe --tags --match 'v[0-9]*' --abbrev=12 --dirty 2>/dev/null) ||
    v=v0.0.0-$(git rev-list --count HEAD)-g$(git rev-parse --short=12 HEAD)$(git diff-index --quiet HEAD -- 2>/dev/null || echo -dirty)
fi
if [ "${1:-}" = --deb ]; then
  [ -n "$v" ] || v=v0.0.0
  # Debian: no leading v; the first hyphen starts local changes (+), the
  # others become dots, so that later commits sort higher.
  echo "$v" | sed -e 's/^v//' -e 's/-/+/' -e 's/-/./g'
  exit 0
fi
echo "$v"
