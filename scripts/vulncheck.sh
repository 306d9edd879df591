#!/usr/bin/env bash
# Runs govulncheck (golang.org/x/vuln, pinned below, built through the Go
# module proxy) over the module when its vulnerability database can be
# reached, and reports what it finds. It never fails and never hangs: an
# unreachable database (a machine without internet access apart from the
# module proxy) is reported and skipped, and every step is bounded by
# timeout. CI runs it (.ci/run); `make vulncheck` runs it by hand.
set -uo pipefail
cd "$(dirname "$0")/.."

GOVULNCHECK=golang.org/x/vuln/cmd/govulncheck@v1.9.0
DB=${GOVULNDB:-https://vuln.go.dev}
host=${DB#*://}
host=${host%%/*}

log() { echo "vulncheck: $*" >&2; }

# Reachability first, bounded: a DNS lookup and a TCP connect to the
# database's host on 443.
if ! timeout 15 bash -c "exec 3<>/dev/tcp/$host/443" 2>/dev/null; then
	log "the vulnerability database $DB cannot be reached from here; govulncheck skipped (not a failure)"
	exit 0
fi
out=$(timeout 600 go run "$GOVULNCHECK" -db "$DB" ./... 2>&1)
status=$?
echo "$out"
case $status in
0) log "govulncheck: no known vulnerability reaches the code" ;;
3) log "govulncheck reported vulnerabilities (above); reported, not failing the run" ;;
124) log "govulncheck did not finish within 10 minutes; skipped (not a failure)" ;;
*) log "govulncheck failed (exit $status; above); reported, not failing the run" ;;
esac
exit 0
