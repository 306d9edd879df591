#!/usr/bin/env bash
# One look at a real GPU server (docs/plugins.md, "Seen on a real server"):
# what the drm plugin and cdictl see, beside the raw facts. Run from the
# repository root after make build; writes $OUT/report.txt (OUT defaults to
# a new temporary directory). Read-only on the host:
# the plugins run with CDI_HOST_ROOT=/ and a private state dir.
OUT=${OUT:-$(mktemp -d)}
echo "report: $OUT/report.txt"
exec > "$OUT/report.txt" 2>&1
set -x
S=$(mktemp -d)
export CDI_HOST_ROOT=/ CDI_STATE_DIR=$S/state CDI_CONF_DIR=$PWD/conf CDI_PATH=$PWD/bin CDI_VERSION=0.0.2
uname -a; cat /etc/os-release | head -3; nproc
nvidia-smi -L; nvidia-smi topo -m
lsmod | grep -E '^(nvidia|drm|ast|mgag200|bochs|virtio_gpu|cirrus|simpledrm|amdgpu)' 
ls -l /dev/dri /dev/dri/by-path /dev/nvidia* /dev/kfd /dev/nvidia-caps
for f in /proc/driver/nvidia/gpus/*/information; do echo "== $f"; cat "$f"; done
cat /proc/driver/nvidia/version
readlink -f /sys/class/drm/card* /sys/class/drm/renderD*
for d in /sys/class/drm/card* /sys/class/drm/renderD*; do echo "$d -> driver $(basename "$(readlink -f "$d/device/driver")") dev $(cat "$d/dev") $(grep DEVNAME "$d/uevent")"; done
for d in /sys/bus/pci/devices/*; do c=$(cat $d/class); case $c in 0x03*) echo "$(basename $d) class $c vendor $(cat $d/vendor) device $(cat $d/device) numa $(cat $d/numa_node) driver $(basename "$(readlink -f $d/driver)" 2>/dev/null) path $(readlink -f $d)";; esac; done
cat /proc/devices
ls /sys/class/kfd 2>&1
for c in VERSION INFO DEVICES; do CDI_COMMAND=$c bin/drm < conf/gpu.d/drm.conf; echo "exit $?"; done
CDI_COMMAND=ADD CDI_REQUEST=gpu:1 CDI_REQUEST_ID=probe bin/drm < conf/gpu.d/drm.conf; echo "exit $?"
bin/cdictl ls -o table
bin/cdictl devices -o table
bin/cdictl topology -o table
bin/cdictl topology gpu
CDI_COMMAND=DEL CDI_REQUEST_ID=probe bin/drm < conf/gpu.d/drm.conf; echo "exit $?"
bin/cdictl ls -o table
echo '{"cdiVersion":"0.0.2","name":"p","type":"gpu","plugin":"drm","args":{"want_device_nodes":["primary"]}}' > $S/primary.conf
CDI_COMMAND=DEVICES bin/drm < $S/primary.conf; echo "exit $?"
CDI_COMMAND=ADD CDI_REQUEST=gpu:1 CDI_REQUEST_ID=probe2 bin/drm < $S/primary.conf; echo "exit $?"
CDI_COMMAND=DEL CDI_REQUEST_ID=probe2 bin/drm < $S/primary.conf; echo "exit $?"
# Compute mode: the GPUs without DRM nodes, and the GKE layout's edits.
CDI_COMMAND=INFO bin/drm < conf/examples/compute.d/nvidia-compute.conf; echo "exit $?"
CDI_COMMAND=DEVICES bin/drm < conf/examples/compute.d/nvidia-compute.conf; echo "exit $?"
CDI_COMMAND=ADD CDI_REQUEST=compute:1 CDI_REQUEST_ID=probe3 bin/drm < conf/examples/compute.d/nvidia-compute.conf; echo "exit $?"
CDI_COMMAND=DEL CDI_REQUEST_ID=probe3 bin/drm < conf/examples/compute.d/nvidia-compute.conf; echo "exit $?"
ls -lR /usr/local/nvidia | head -60
ls -l /lib/x86_64-linux-gnu/libcuda.so* /lib/x86_64-linux-gnu/libnvidia-ml.so* /usr/bin/nvidia-smi
ls -l /dev/vfio /dev/iommu /sys/kernel/iommu_groups 2>&1 | head -20
CDI_COMMAND=DEVICES bin/drm < conf/examples/pgpu.d/pgpu.conf; echo "exit $?"
lspci -tv 2>&1 | head -80
lspci -nn 2>&1 | grep -iE 'vga|3d|display|nvidia|aspeed|matrox' 
for a in $(ls /proc/driver/nvidia/gpus 2>/dev/null); do readlink -f /sys/bus/pci/devices/$a; done
rm -rf "$S"
