#!/usr/bin/env bash
# Runs the plugins as a kubelet would, on the bundled fixture host
# (demo/host.json), printing each command and its answer the way the spec's
# examples do. Needs no network and no root: without root the fixture's /dev
# entries are 0:0 character devices (Linux 5.8 and later lets anyone make
# those), and sysfs says 0:0 to match.
#
# KEEP=1 keeps the fixture host and its state, and ends by printing the
# environment that points cdictl and the plugins at them. BIN names the
# directory of the binaries (default bin/, as make builds them).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(cd "${BIN:-bin}" && pwd)

work=$(mktemp -d "${TMPDIR:-/tmp}/cdi-demo.XXXXXX")
if [ "${KEEP:-}" != 1 ]; then
  trap 'rm -rf "$work"' EXIT
fi
go run ./test/fixture/mkhost -host demo/host.json -root "$work/host"

export CDI_HOST_ROOT="$work/host" CDI_STATE_DIR="$work/state" CDI_CONF_DIR="$PWD/demo/conf" CDI_PATH="$bin"
echo "Fixture host: $CDI_HOST_ROOT (from demo/host.json)"
echo "State:        $CDI_STATE_DIR"
[ "$(id -u)" = 0 ] || echo "Not root: /dev entries of the fixture are 0:0 character devices, not the real numbers."

# run PLUGIN CONF VAR=VALUE... : print the command line, the answer and the exit status.
run() {
  local plugin=$1 conf=$2; shift 2
  echo
  echo "# env $* /opt/cdi/bin/$plugin < /etc/cdi/${conf}"
  set +e
  env "$@" "$bin/$plugin" < "demo/conf/$conf"
  local status=$?
  set -e
  echo "Exit status: $status"
}

echo
echo "== generic-tty: virtual consoles, 12 reserved for the host"
run generic-tty tty.d/generic-tty.conf CDI_COMMAND=VERSION
run generic-tty tty.d/generic-tty.conf CDI_COMMAND=INFO
run generic-tty tty.d/generic-tty.conf CDI_VERSION=0.0.1 CDI_COMMAND=ADD CDI_REQUEST=tty:3 CDI_REQUEST_ID=7890
run generic-tty tty.d/generic-tty.conf CDI_VERSION=0.0.1 CDI_COMMAND=ADD CDI_REQUEST=tty:3 CDI_REQUEST_ID=7890
run generic-tty tty.d/generic-tty.conf CDI_VERSION=0.0.1 CDI_COMMAND=ADD CDI_REQUEST=tty:2 CDI_REQUEST_ID=4444
run generic-tty tty.d/generic-tty.conf CDI_VERSION=0.999 CDI_COMMAND=ADD CDI_REQUEST=tty:1 CDI_REQUEST_ID=1
run generic-tty tty.d/generic-tty.conf CDI_VERSION=0.0.1 CDI_COMMAND=MYCMD
run generic-tty tty.d/generic-tty.conf CDI_VERSION=0.0.1 CDI_COMMAND=DEL CDI_REQUEST_ID=7890
run generic-tty tty.d/generic-tty.conf CDI_VERSION=0.0.1 CDI_COMMAND=DEL CDI_REQUEST_ID=3456

echo
echo "== drm: GPUs of two vendors on two NUMA nodes (the spec's drm.conf)"
run drm gpu.d/drm.conf CDI_COMMAND=INFO
run drm gpu.d/drm.conf CDI_VERSION=0.0.1 CDI_COMMAND=ADD CDI_REQUEST=gpu:1 CDI_REQUEST_ID=1234
run drm gpu.d/drm.conf CDI_VERSION=0.0.1 CDI_COMMAND=ADD CDI_REQUEST=gpu:2 CDI_REQUEST_ID=5678 CDI_REQUEST_NUMA_LOCALITY=1
run drm gpu.d/drm.conf CDI_VERSION=0.0.1 CDI_COMMAND=ADD CDI_REQUEST=gpu:1,gpu-memory:2048Mi CDI_REQUEST_ID=3456
run drm gpu.d/drm.conf CDI_VERSION=0.0.1 CDI_COMMAND=ADD CDI_REQUEST=gpu:2 CDI_REQUEST_ID=9999
run drm gpu.d/drm.conf CDI_VERSION=0.0.1 CDI_COMMAND=DEL CDI_REQUEST_ID=1234
run drm gpu.d/drm.conf CDI_VERSION=0.0.1 CDI_COMMAND=DEL CDI_REQUEST_ID=3456

echo
echo "== sriov: VFs of a pre-partitioned PF, each chained to drm for its render node"
run sriov vgpu.d/sriov.conf CDI_COMMAND=INFO
run sriov vgpu.d/sriov.conf CDI_VERSION=0.0.2 CDI_COMMAND=ADD CDI_REQUEST=vgpu:2 CDI_REQUEST_ID=vm-1
run sriov vgpu.d/sriov.conf CDI_VERSION=0.0.2 CDI_COMMAND=DEL CDI_REQUEST_ID=vm-1

# ctl ARGS... : print and run a cdictl command.
ctl() {
  echo
  echo "# cdictl $*"
  set +e
  "$bin/cdictl" "$@"
  local status=$?
  set -e
  echo "Exit status: $status"
}

echo
echo "== cdictl: the same node through the reference caller (configs in demo/conf/)"
ctl version -o table
ctl info -o table
ctl add --id pod-a --numa 1 gpu:1,tty:2,vgpu:1
ctl add --id pod-b tty:1,gpu:9
ctl devices -o table gpu
ctl topology -o table
ctl ls -o table
ctl del --id pod-a -o table
ctl gc --valid 4444 -o table
ctl ls -o table

if [ "${KEEP:-}" = 1 ]; then
  echo
  echo "== The demo host is kept (KEEP=1). To go on with it, in your shell:"
  echo
  echo "export CDI_HOST_ROOT='$CDI_HOST_ROOT' CDI_CONF_DIR='$CDI_CONF_DIR' CDI_PATH='$CDI_PATH' CDI_STATE_DIR='$CDI_STATE_DIR'"
  echo "$bin/cdictl info -o table"
  echo
  echo "Remove it with: rm -rf '$work'"
fi
