#!/usr/bin/env bash
# A real container on a GPU through our plugin and spec (issue: GPUs as
# servers expose them; docs/plugins.md "Seen on a real server"). Two steps:
#
#   scripts/gpu-container-check.sh prepare   # here, with Go and gcc: fills .gpucheck/
#   scripts/gpu-container-check.sh run       # on the GPU machine: writes $OUT/report.txt
#
# prepare builds drm and cdictl (or copies them from $BIN), and ocispec (test/gpucheck/ocispec: the OCI
# config of a container with CDI devices injected by the CDI library),
# compiles test/gpucheck/cudacount.c (dlopen libcuda.so.1, cuInit,
# cuDeviceGetCount) and copies runc with the libseccomp it links and a
# static busybox into .gpucheck/ (git-ignored; carry it to the machine),
# or $GPUCHECK_DIR.
#
# With the project's device tool: prepare here, then one call such as
#   run(command="scripts/gpu-container-check.sh run", carry=[".gpucheck"])
# ($OUT comes back with report.txt; a run takes well under a minute).
#
# run, as root, reads the host only: drm's INFO, DEVICES, ADD (twice: the
# second must be code 103) and DEL under the compute example with the GKE
# layout's container_edits (conf/examples/cuda.d/nvidia-cuda.conf: the
# driver in /usr/local/nvidia mounted read-only), a private state dir and
# spec dir, CDI_HOST_ROOT=$HOST_ROOT (default /). Then a busybox root
# filesystem with the C library the programs link (copied from the host,
# found by ldd), the OCI config from the spec the plugin wrote, and runc
# runs `nvidia-smi -L` and cudacount in it. No driver rebinding, no module
# loading, no change to the accelerator. Knobs, for a dry run elsewhere
# (test/e2e TestGPUContainerCheckScript): HOST_ROOT, DRIVER_DIR (the host
# directory mounted, default /usr/local/nvidia), SMI (the command run for
# nvidia-smi -L). Exit status: 0 when every step gave what it must.
set -u
cd "$(dirname "$0")/.."
G=${GPUCHECK_DIR:-$PWD/.gpucheck}

prepare() {
	set -e
	mkdir -p "$G"
	if [ -z "${BIN:-}" ]; then
		make build
		BIN=bin
	fi
	cp "$BIN/drm" "$BIN/cdictl" "$G/"
	CGO_ENABLED=0 go build -trimpath -o "$G/ocispec" ./test/gpucheck/ocispec
	gcc -O2 -Wall -o "$G/cudacount" test/gpucheck/cudacount.c
	runc=$(command -v runc)
	cp "$runc" "$G/runc"
	for lib in $(ldd "$runc" | awk '/libseccomp/ {print $3}'); do cp -L "$lib" "$G/"; done
	cp "$(command -v busybox)" "$G/busybox"
	if ldd "$G/busybox" >/dev/null 2>&1; then echo "busybox must be static (busybox-static)"; exit 1; fi
	ls -l "$G"
}

# copylibs copies into the root filesystem $1 the shared objects the
# programs $2... link, at their host paths.
copylibs() {
	local root=$1; shift
	for lib in $(ldd "$@" 2>/dev/null | awk '{for (i=1;i<=NF;i++) if ($i ~ /^\//) print $i}' | sort -u); do
		mkdir -p "$root$(dirname "$lib")"
		cp -L "$lib" "$root$lib"
	done
}

run() {
	OUT=${OUT:-$(mktemp -d)}
	echo "report: $OUT/report.txt"
	exec > "$OUT/report.txt" 2>&1
	HOST_ROOT=${HOST_ROOT:-/}
	DRIVER_DIR=${DRIVER_DIR:-/usr/local/nvidia}
	SMI=${SMI:-nvidia-smi -L}
	S=$(mktemp -d)
	trap 'rm -rf "$S"' EXIT
	fail=0
	check() { if eval "$1"; then echo "OK: $2"; else echo "FAIL: $2"; fail=1; fi; }
	export CDI_HOST_ROOT=$HOST_ROOT CDI_STATE_DIR=$S/state CDI_VERSION=0.0.2
	mkdir -p "$S/state" "$S/cdi" "$S/rootfs" "$S/bundle"
	# The example, with a private spec dir and the host directory mounted
	# (its container path stays /usr/local/nvidia).
	sed -e "s|\"kind\": \"example.com/cuda\",|\"kind\": \"example.com/cuda\", \"dir\": \"$S/cdi\",|" \
		-e "s|\"hostPath\": \"/usr/local/nvidia\"|\"hostPath\": \"$DRIVER_DIR\"|" \
		conf/examples/cuda.d/nvidia-cuda.conf > "$S/cuda.conf"
	set -x
	uname -a; nproc; cat "$S/cuda.conf"
	ls -l "$HOST_ROOT/dev/" | grep -E 'nvidia|vfio|iommu'
	cat "$HOST_ROOT"/proc/driver/nvidia/gpus/*/information
	ls -l "$DRIVER_DIR" "$DRIVER_DIR"/bin "$DRIVER_DIR"/lib64 | head -40
	CDI_COMMAND=INFO "$G/drm" < "$S/cuda.conf"
	CDI_COMMAND=DEVICES "$G/drm" < "$S/cuda.conf" | tee "$S/devices.json"
	CDI_COMMAND=ADD CDI_REQUEST=cuda:1 CDI_REQUEST_ID=gpucheck "$G/drm" < "$S/cuda.conf" | tee "$S/add.json"
	add=$(tr -d ' \n' < "$S/add.json")
	set +x
	check '[[ $add == *\"devices\":[\"/dev/nvidia0\",\"/dev/nvidiactl\",\"/dev/nvidia-uvm\",\"/dev/nvidia-uvm-tools\"* ]]' "ADD cuda:1 gives /dev/nvidia0, nvidiactl, nvidia-uvm, nvidia-uvm-tools"
	set -x
	CDI_COMMAND=ADD CDI_REQUEST=cuda:1 CDI_REQUEST_ID=gpucheck2 "$G/drm" < "$S/cuda.conf" > "$S/add2.json"
	cat "$S/add2.json"
	set +x
	check 'grep -q "\"code\": *103" "$S/add2.json"' "a second ADD gets 103"
	check 'grep -q "\"uuid\": *\"GPU-" "$S/devices.json"' "DEVICES carries the GPU's uuid"
	set -x
	cat "$S"/cdi/*.json
	# The root filesystem: busybox and the C library the programs link.
	mkdir -p "$S/rootfs/bin" "$S/rootfs/usr/local/nvidia" "$S/rootfs/proc" "$S/rootfs/dev" "$S/rootfs/sys" "$S/rootfs/tmp"
	cp "$G/busybox" "$S/rootfs/bin/busybox"
	for a in sh ls cat env echo stat; do ln -s busybox "$S/rootfs/bin/$a"; done
	cp "$G/cudacount" "$S/rootfs/bin/cudacount"
	smi=$(set -- $SMI; echo "$1")
	# The driver's libraries need libm, libdl, libpthread and librt too.
	copylibs "$S/rootfs" "$G/cudacount" "$HOST_ROOT$DRIVER_DIR/bin/$smi" \
		$(ls "$HOST_ROOT$DRIVER_DIR"/lib64/libcuda.so.1 "$HOST_ROOT$DRIVER_DIR"/lib64/libnvidia-ml.so.1 "$HOST_ROOT$DRIVER_DIR"/lib64/libnvidia-ptxjitcompiler.so.1 2>/dev/null)
	# runc with the libseccomp it links, beside it.
	export LD_LIBRARY_PATH=$G
	"$G/runc" --version
	i=0
	for cmd in "env" "ls -l /dev /usr/local/nvidia/bin /usr/local/nvidia/lib64" "$SMI" "cudacount"; do
		i=$((i+1))
		rm -rf "$S/bundle"
		# shellcheck disable=SC2086
		"$G/ocispec" -spec-dir "$S/cdi" -device example.com/cuda=gpucheck -rootfs "$S/rootfs" -bundle "$S/bundle" -- $cmd
		"$G/runc" --root "$S/runc" run --bundle "$S/bundle" "gpucheck-$$-$i" | tee "$S/out$i.txt"
	done
	set +x
	check 'grep -q "^GPU 0: " "$S/out3.txt"' "$SMI in the container names GPU 0 ($(grep -o 'UUID: [^)]*' "$S/out3.txt"))"
	check 'grep -qx "cuDeviceGetCount: 1" "$S/out4.txt"' "cuInit and cuDeviceGetCount in the container answer 1"
	set -x
	CDI_COMMAND=DEL CDI_REQUEST_ID=gpucheck "$G/drm" < "$S/cuda.conf"; echo "exit $?"
	set +x
	check '[ -z "$(ls "$S/cdi")" ]' "DEL removes the spec"
	echo "result: $([ $fail = 0 ] && echo PASS || echo FAIL)"
	return $fail
}

case ${1:-} in
prepare) prepare ;;
run) run ;;
*) echo "usage: $0 prepare|run"; exit 2 ;;
esac
