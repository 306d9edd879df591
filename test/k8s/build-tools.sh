#!/usr/bin/env bash
# Builds the pinned tools that the real-node tests (make e2e-node,
# make e2e-cluster) run into a cache outside the repository, and installs
# the Debian packages they need when they are missing and we are root.
#
#   kubelet, kube-apiserver, kube-scheduler, kube-controller-manager
#       from test/k8s/tools (k8s.io/kubernetes, the version its go.mod pins)
#   containerd, containerd-shim-runc-v2, ctr   CONTAINERD_VERSION below
#   runc, podman, busybox-static, etcd-server  from Debian
#
# The cache is ${CDI_E2E_CACHE:-$HOME/.cache/cdi-e2e}. Each version builds
# once into its own directory (a directory exists only when its build
# completed), and $CACHE/bin links the current ones. A second run only
# checks. A cold build takes about 20 minutes on 2 cores.
set -euo pipefail

CONTAINERD_VERSION=v2.2.9
TOOLS=$(cd "$(dirname "$0")/tools" && pwd)
CACHE=${CDI_E2E_CACHE:-$HOME/.cache/cdi-e2e}
K8S_VERSION=$(cd "$TOOLS" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
K8S_BINS="kubelet kube-apiserver kube-scheduler kube-controller-manager"
CONTAINERD_BINS="containerd containerd-shim-runc-v2 ctr"

export CGO_ENABLED=0

log() { echo "build-tools: $*" >&2; }

# debs installs the Debian packages the suites need (scripts/test-deps.sh):
# without them the tests skip or fail and say what is missing.
debs() {
	"$(dirname "$0")/../../scripts/test-deps.sh" || log "the tests will say what is missing"
}

# build NAME VERSION BINS CMD... runs CMD with $out set to a fresh directory
# and moves it to $CACHE/NAME-VERSION once every binary is there.
build() {
	local name=$1 version=$2 bins=$3 dir=$CACHE/$1-$2
	shift 3
	if [ -d "$dir" ]; then
		log "$name $version: cached in $dir"
	else
		log "$name $version: building (this takes minutes)"
		rm -rf "$dir.tmp" && mkdir -p "$dir.tmp"
		local start=$SECONDS
		out=$dir.tmp "$@"
		for b in $bins; do [ -x "$dir.tmp/$b" ] || { log "$name: $b was not built"; return 1; }; done
		mv "$dir.tmp" "$dir"
		log "$name $version: built in $((SECONDS - start))s"
	fi
	mkdir -p "$CACHE/bin"
	for b in $bins; do ln -sfn "../$name-$version/$b" "$CACHE/bin/$b"; done
}

build_k8s() {
	local v=k8s.io/component-base/version minor=${K8S_VERSION#v1.}
	minor=${minor%%.*}
	(cd "$TOOLS" && go build -trimpath -ldflags "-s -w -X $v.gitVersion=$K8S_VERSION \
		-X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean" \
		-o "$out/" $(printf './%s ' $K8S_BINS))
	"$out/kubelet" --version | grep -qx "Kubernetes $K8S_VERSION"
}

build_containerd() {
	local pkg=github.com/containerd/containerd/v2/cmd
	GOBIN=$out go install -tags "no_btrfs no_devmapper no_zfs" \
		$(for b in $CONTAINERD_BINS; do printf '%s/%s@%s ' $pkg "$b" $CONTAINERD_VERSION; done)
}

debs
build containerd "$CONTAINERD_VERSION" "$CONTAINERD_BINS" build_containerd
build kubernetes "$K8S_VERSION" "$K8S_BINS" build_k8s
log "tools in $CACHE/bin"
