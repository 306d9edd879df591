#!/usr/bin/env bash
# Builds the pinned tools that the real-node tests (make e2e-node,
# make e2e-cluster) run into a cache outside the repository, and installs
# the Debian packages they need when they are missing and we are root.
#
#   kubelet, kube-apiserver, kube-scheduler, kube-controller-manager
#       from test/k8s/tools (k8s.io/kubernetes, the version its go.mod pins),
#       or from K8S_VERSION when it is set (K8S_VERSION=v1.35.4, the oldest
#       supported release): a copy of test/k8s/tools with its go.mod made
#       for that version, in $CACHE/src/tools-$K8S_VERSION
#   containerd, containerd-shim-runc-v2, ctr   CONTAINERD_VERSION below
#   helm             HELM_VERSION below, from its Go module (helm.sh/helm/v4)
#   runc, podman, busybox-static, etcd-server  from Debian
#
# The cache is ${CDI_E2E_CACHE:-$HOME/.cache/cdi-e2e}. Each version builds
# once into its own directory (a directory exists only when its build
# completed), and $CACHE/bin links the current ones. A second run only
# checks, and relinks $CACHE/bin when K8S_VERSION names another cached
# version. A cold build takes about 20 minutes on 2 cores.
#
# "build-tools.sh helm" builds only helm (about 2 minutes cold): make test
# renders the chart with it (make manifests).
set -euo pipefail

CONTAINERD_VERSION=v2.2.9
HELM_VERSION=v4.3.1
TOOLS=$(cd "$(dirname "$0")/tools" && pwd)
CACHE=${CDI_E2E_CACHE:-$HOME/.cache/cdi-e2e}
PINNED=$(cd "$TOOLS" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
K8S_VERSION=${K8S_VERSION:-$PINNED}
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

# tools_module DIR VERSION makes DIR a copy of test/k8s/tools's mains with
# a go.mod for k8s.io/kubernetes VERSION. Upstream requires its staging
# modules at v0.0.0 and replaces them with ./staging; the published
# releases of the same tag (v0.MINOR.PATCH) stand in for them. This is
# also how test/k8s/tools/go.mod itself is made.
tools_module() {
	local dir=$1 version=$2 gomod m
	rm -rf "$dir" && mkdir -p "$dir"
	for m in $K8S_BINS; do mkdir "$dir/$m" && cp "$TOOLS/$m/main.go" "$dir/$m/"; done
	gomod=$(go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')
	[ -n "$gomod" ] || { log "k8s.io/kubernetes@$version: no go.mod from the module proxy"; return 1; }
	(
		cd "$dir"
		go mod init github.com/cdi-exec/plugins/test/k8s/tools 2>/dev/null
		go mod edit -go="$(awk '$1 == "go" {print $2; exit}' "$gomod")" -require "k8s.io/kubernetes@$version"
		for m in $(awk '$1 ~ /^k8s\.io\// && $2 == "v0.0.0" {print $1}' "$gomod" | sort -u); do
			go mod edit -replace "$m=$m@v0.${version#v1.}"
		done
		go mod tidy
	)
}

build_k8s() {
	local v=k8s.io/component-base/version minor=${K8S_VERSION#v1.} src=$TOOLS
	minor=${minor%%.*}
	if [ "$K8S_VERSION" != "$PINNED" ]; then
		src=$CACHE/src/tools-$K8S_VERSION
		tools_module "$src" "$K8S_VERSION"
	fi
	(cd "$src" && go build -trimpath -ldflags "-s -w -X $v.gitVersion=$K8S_VERSION \
		-X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean" \
		-o "$out/" $(printf './%s ' $K8S_BINS))
	"$out/kubelet" --version | grep -qx "Kubernetes $K8S_VERSION"
}

build_containerd() {
	local pkg=github.com/containerd/containerd/v2/cmd
	GOBIN=$out go install -tags "no_btrfs no_devmapper no_zfs" \
		$(for b in $CONTAINERD_BINS; do printf '%s/%s@%s ' $pkg "$b" $CONTAINERD_VERSION; done)
}

build_helm() {
	GOBIN=$out go install "helm.sh/helm/v4/cmd/helm@$HELM_VERSION"
	"$out/helm" version >/dev/null
}

if [ "${1:-}" = helm ]; then
	build helm "$HELM_VERSION" helm build_helm
	exit 0
fi

# --pin VERSION rewrites test/k8s/tools/go.mod and go.sum for VERSION, the
# way a maintainer moves the pinned release; it builds nothing.
if [ "${1:-}" = --pin ]; then
	[ -n "${2:-}" ] || { log "usage: $0 --pin v1.MINOR.PATCH"; exit 2; }
	tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
	tools_module "$tmp/tools" "$2"
	cp "$tmp/tools/go.mod" "$tmp/tools/go.sum" "$TOOLS/"
	log "test/k8s/tools pinned at k8s.io/kubernetes $2"
	exit 0
fi

debs
build containerd "$CONTAINERD_VERSION" "$CONTAINERD_BINS" build_containerd
build kubernetes "$K8S_VERSION" "$K8S_BINS" build_k8s
build helm "$HELM_VERSION" helm build_helm
log "tools in $CACHE/bin"
