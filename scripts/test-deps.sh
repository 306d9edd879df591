#!/usr/bin/env bash
# Installs the Debian packages the test suites run (docs/testing.md):
#
#   podman, runc, busybox-static, util-linux   test/e2e's podman test; the
#                                               real-node suites' containers
#   etcd-server                                 make e2e-cluster's etcd
#   dpkg                                        make test-deb
#   git, make                                   the version and install tests
#   gcc                                         test/e2e's dry run of
#                                               scripts/gpu-container-check.sh
#
# Only packages whose command is missing are installed. apt-get's output
# and errors are shown, and the script fails when a package cannot be
# installed or its command is still missing after: a suite that lacks one
# would skip, and a skip fails CI.
set -euo pipefail

# package:command pairs; the command proves the package is there.
PAIRS="podman:podman runc:runc busybox-static:busybox util-linux:unshare etcd-server:etcd dpkg:dpkg-deb git:git make:make gcc:gcc"

log() { echo "test-deps: $*" >&2; }

missing=()
for pair in $PAIRS; do
	command -v "${pair#*:}" >/dev/null || missing+=("${pair%%:*}")
done
if [ ${#missing[@]} = 0 ]; then
	log "all installed"
	exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
	log "missing ${missing[*]}, and installing them needs root and apt-get"
	exit 1
fi
log "installing ${missing[*]}"
timeout 300 apt-get update -q
# policy-rc.d keeps the packages' services (etcd) from starting.
rc=/usr/sbin/policy-rc.d made=
if [ ! -e $rc ]; then
	printf '#!/bin/sh\nexit 101\n' >$rc && chmod +x $rc && made=1
	trap 'rm -f $rc' EXIT
fi
DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -q --no-install-recommends "${missing[@]}"
status=0
for pair in $PAIRS; do
	if ! command -v "${pair#*:}" >/dev/null; then
		log "${pair%%:*} was installed, but ${pair#*:} is still missing"
		status=1
	fi
done
exit $status
