#!/bin/sh
# licenses.sh DIR BINARY... puts the suite's LICENSE and NOTICE in DIR (and
# LICENSE as DIR/copyright, where Debian looks), and the license, notice and
# patent files of every Go module linked into the BINARYs in
# DIR/third-party/<module path>/. Fails when a module has no license file,
# so that no package ships without one. Needs the modules in the module
# cache, which building the binaries put there.
set -eu
out=$1; shift
cd "$(dirname "$0")/.."
mkdir -p "$out/third-party"
cp LICENSE NOTICE "$out/"
cp LICENSE "$out/copyright"
go version -m "$@" | awk '$1 == "dep" || $1 == "=>" { print $2 "@" $3 }' | sort -u |
while read -r mod; do
  dir=$(go mod download -json "$mod" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')
  dst="$out/third-party/${mod%@*}"
  mkdir -p "$dst"
  found=
  for f in "$dir"/*; do
    [ -f "$f" ] || continue
    # Any spelling: LICENSE, License.txt, license.md (josharian/intern).
    case $(basename "$f" | tr '[:upper:]' '[:lower:]') in
    license* | licence* | copying* | notice* | patents*) ;;
    *) continue ;;
    esac
    cp "$f" "$dst/" && chmod 0644 "$dst/$(basename "$f")"
    found=1
  done
  [ -n "$found" ] || { echo "licenses.sh: no license file in $mod ($dir)" >&2; exit 1; }
done
