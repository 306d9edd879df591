#!/usr/bin/env bash
# Runs the plugins as a kubelet would, on two bundled fixture hosts: the
# GPUs and ttys of demo/host.json (configs in demo/conf/), then kvm and USB
# serial adapters on mkhost's generic-devices host (demo/generic-conf/).
# Each step prints the command line that runs, exactly, then the answer
# and the exit status; the lines that set the environment are printed too,
# so that with KEEP=1 any step can be pasted into a shell from the
# repository's top directory. Needs no network and no root: without root
# the fixtures' /dev entries are 0:0 character devices (Linux 5.8 and
# later lets anyone make those), and sysfs says 0:0 to match.
#
# KEEP=1 keeps the fixture hosts and their state, and ends by printing the
# environment that points cdictl and the plugins at the first. BIN names
# the directory of the binaries (default bin/, as make builds them).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(cd "${BIN:-bin}" && pwd)
# The binaries as the printed commands name them: relative to the
# repository when they are in it.
shown=$bin
case $bin in "$PWD"/*) shown=${bin#"$PWD"/} ;; esac
shown=$(printf %q "$shown")

work=$(mktemp -d "${TMPDIR:-/tmp}/cdi-demo.XXXXXX")
if [ "${KEEP:-}" != 1 ]; then
  trap 'rm -rf "$work"' EXIT
fi
go build -o "$work/mkhost" ./test/fixture/mkhost
"$work/mkhost" -host demo/host.json -root "$work/host"
"$work/mkhost" -host generic-devices -root "$work/generic-devices"
rm "$work/mkhost"
# The same, quoted for the printed lines.
qwork=$(printf %q "$work") qbin=$(printf %q "$bin")
[ "$(id -u)" = 0 ] || echo "Not root: /dev entries of the fixtures are 0:0 character devices, not the real numbers."

# setenv 'export VAR=VALUE...': print the line and run it.
setenv() {
  echo
  echo "\$ $1"
  eval "$1"
}

# show COMMAND: print the command line, run exactly it, then print the
# exit status.
show() {
  echo
  echo "\$ $1"
  set +e
  eval "$1"
  local status=$?
  set -e
  echo "Exit status: $status"
}

# plugin PLUGIN CONF VAR=VALUE...: a plugin run with the config on stdin.
plugin() {
  local name=$1 conf=$2; shift 2
  show "$* $shown/$name < $conf"
}

echo "== The fixture host of demo/host.json: ttys, GPUs of two vendors on two NUMA nodes, an SR-IOV GPU"
setenv "export CDI_HOST_ROOT=$qwork/host CDI_STATE_DIR=$qwork/state CDI_PATH=$qbin"

echo
echo "== generic-tty: virtual consoles, 12 reserved for the host"
tty=demo/conf/tty.d/generic-tty.conf
plugin generic-tty $tty CDI_COMMAND=VERSION
plugin generic-tty $tty CDI_COMMAND=INFO
plugin generic-tty $tty CDI_VERSION=0.0.1 CDI_COMMAND=ADD CDI_REQUEST=tty:3 CDI_REQUEST_ID=7890
plugin generic-tty $tty CDI_VERSION=0.0.1 CDI_COMMAND=ADD CDI_REQUEST=tty:3 CDI_REQUEST_ID=7890
plugin generic-tty $tty CDI_VERSION=0.0.1 CDI_COMMAND=ADD CDI_REQUEST=tty:2 CDI_REQUEST_ID=4444
plugin generic-tty $tty CDI_VERSION=0.999 CDI_COMMAND=ADD CDI_REQUEST=tty:1 CDI_REQUEST_ID=1
plugin generic-tty $tty CDI_VERSION=0.0.1 CDI_COMMAND=MYCMD
plugin generic-tty $tty CDI_VERSION=0.0.1 CDI_COMMAND=DEL CDI_REQUEST_ID=7890
plugin generic-tty $tty CDI_VERSION=0.0.1 CDI_COMMAND=DEL CDI_REQUEST_ID=3456

echo
echo "== drm: GPUs of two vendors on two NUMA nodes (the spec's drm.conf)"
gpu=demo/conf/gpu.d/drm.conf
plugin drm $gpu CDI_COMMAND=INFO
plugin drm $gpu CDI_VERSION=0.0.1 CDI_COMMAND=ADD CDI_REQUEST=gpu:1 CDI_REQUEST_ID=1234
plugin drm $gpu CDI_VERSION=0.0.1 CDI_COMMAND=ADD CDI_REQUEST=gpu:2 CDI_REQUEST_ID=5678 CDI_REQUEST_NUMA_LOCALITY=1
plugin drm $gpu CDI_VERSION=0.0.1 CDI_COMMAND=ADD CDI_REQUEST=gpu:1,gpu-memory:2048Mi CDI_REQUEST_ID=3456
plugin drm $gpu CDI_VERSION=0.0.1 CDI_COMMAND=ADD CDI_REQUEST=gpu:2 CDI_REQUEST_ID=9999
plugin drm $gpu CDI_VERSION=0.0.1 CDI_COMMAND=DEL CDI_REQUEST_ID=1234
plugin drm $gpu CDI_VERSION=0.0.1 CDI_COMMAND=DEL CDI_REQUEST_ID=3456
echo
echo "# 5678 holds both GPUs of NUMA node 1: free them, so that cdictl's --numa 1 below can have one."
plugin drm $gpu CDI_VERSION=0.0.1 CDI_COMMAND=DEL CDI_REQUEST_ID=5678

echo
echo "== sriov: VFs of a pre-partitioned PF, each chained to drm for its render node"
vgpu=demo/conf/vgpu.d/sriov.conf
plugin sriov $vgpu CDI_COMMAND=INFO
plugin sriov $vgpu CDI_VERSION=0.0.2 CDI_COMMAND=ADD CDI_REQUEST=vgpu:2 CDI_REQUEST_ID=vm-1
plugin sriov $vgpu CDI_VERSION=0.0.2 CDI_COMMAND=DEL CDI_REQUEST_ID=vm-1

echo
echo "== generic: /dev/kvm shared by two sandboxes, and a USB serial adapter chosen by its serial number"
echo "   (mkhost's generic-devices host: kvm, fuse, tun, three CH340 adapters, a webcam, a YubiKey, an NPU)"
setenv "export CDI_HOST_ROOT=$qwork/generic-devices CDI_STATE_DIR=$qwork/generic-state"
kvm=demo/generic-conf/kvm.d/generic-kvm.conf
plugin generic $kvm CDI_COMMAND=INFO
plugin generic $kvm CDI_COMMAND=ADD CDI_REQUEST=kvm:1 CDI_REQUEST_ID=sandbox-1
plugin generic $kvm CDI_COMMAND=ADD CDI_REQUEST=kvm:1 CDI_REQUEST_ID=sandbox-2
echo
echo "# Both shares are held: a third sandbox waits until one is freed."
plugin generic $kvm CDI_COMMAND=ADD CDI_REQUEST=kvm:1 CDI_REQUEST_ID=sandbox-3
plugin generic $kvm CDI_COMMAND=DEL CDI_REQUEST_ID=sandbox-1
plugin generic $kvm CDI_COMMAND=ADD CDI_REQUEST=kvm:1 CDI_REQUEST_ID=sandbox-3
echo
echo "# Three adapters of the same model; the config names one by its serial number (B71234XY)."
serial=demo/generic-conf/usbserial.d/generic-serial.conf
plugin generic $serial CDI_COMMAND=INFO
plugin generic $serial CDI_COMMAND=ADD CDI_REQUEST=usbserial:1 CDI_REQUEST_ID=flasher
show "$shown/cdictl devices -o table --conf-dir demo/generic-conf"

echo
echo "== cdictl: the first host through the reference caller (configs in demo/conf/)"
setenv "export CDI_HOST_ROOT=$qwork/host CDI_STATE_DIR=$qwork/state CDI_CONF_DIR=demo/conf"
ctl() { show "$shown/cdictl $*"; }
ctl version -o table
ctl info -o table
ctl add --id pod-a --numa 1 gpu:1,tty:2,vgpu:1
ctl add --id pod-b tty:1,gpu:9
ctl add --id pod-c gpu:1
ctl devices -o table gpu
ctl topology -o table
ctl ls -o table
ctl del --id pod-a -o table
echo
echo "# pod-c is a leak: no pod of that id runs any more. gc frees every id but those named."
ctl gc --valid 4444 -o table
ctl ls -o table

if [ "${KEEP:-}" = 1 ]; then
  echo
  echo "== The demo hosts are kept (KEEP=1). To go on with the first, in your shell:"
  echo
  echo "export CDI_HOST_ROOT='$work/host' CDI_CONF_DIR='$PWD/demo/conf' CDI_PATH='$bin' CDI_STATE_DIR='$work/state'"
  echo "$bin/cdictl info -o table"
  echo
  echo "The second: CDI_HOST_ROOT='$work/generic-devices' CDI_CONF_DIR='$PWD/demo/generic-conf' CDI_STATE_DIR='$work/generic-state'."
  echo "Remove them with: rm -rf '$work'"
fi
