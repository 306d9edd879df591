# CDI exec plugins. `make demo` shows the suite on a bundled fixture host;
# `make test` is what CI runs.

GO          ?= go
BIN         ?= bin
DESTDIR     ?=
# Plugins go to $(PREFIX)/bin, where callers look for them (CDI_PATH);
# cdictl and the other tools from cmd/ go to $(BINPREFIX), on the PATH.
PREFIX      ?= /opt/cdi
BINPREFIX   ?= /usr/local/bin
CONFDIR     ?= /etc/cdi
PLUGINDIR   := $(DESTDIR)$(PREFIX)/bin
TOOLDIR     := $(DESTDIR)$(BINPREFIX)
PLUGINS     := $(notdir $(wildcard plugins/*))
TOOLS       := $(notdir $(wildcard cmd/*))
CONFS       := $(wildcard conf/*.d/*.conf)
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
NFPM        := github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.44.2
FUZZTIME    ?= 20s

# The version stamped into every binary (docs/operations.md#versions).
# GIT_TRUST makes git trust this checkout (and only it) whoever owns it (command-line
# config, in the environment): in a clone owned by another user ("dubious
# ownership") the version and commit are still found, and go build's own
# VCS stamping does not fail.
GIT_TRUST := GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=safe.directory GIT_CONFIG_VALUE_0='$(CURDIR)'
ifeq ($(origin VERSION),undefined)
VERSION := $(shell $(GIT_TRUST) scripts/version.sh)
endif
ifeq ($(origin COMMIT),undefined)
COMMIT := $(shell $(GIT_TRUST) git rev-parse HEAD 2>/dev/null)
endif
BUILDINFO := github.com/cdi-exec/plugins/internal/buildinfo

export CGO_ENABLED := 0
GOFLAGS_BUILD := -trimpath -buildvcs=auto \
	-ldflags "-s -w -X $(BUILDINFO).version=$(VERSION) -X $(BUILDINFO).commit=$(COMMIT)"

.PHONY: all build plugins image chart install install-conf uninstall deb test test-deb e2e-repeat e2e-node e2e-cluster bench-k8s bench-scale unit lint demo demo-k8s bench fuzz clean helm manifests vulncheck

all: build

build:
	$(GIT_TRUST) $(GO) build $(GOFLAGS_BUILD) -o $(BIN)/ ./plugins/... ./cmd/...

# The plugins and cdictl only: what a node without Kubernetes runs, and
# all that make demo and the README's first steps need. It leaves out
# cdi-kubelet-plugin, whose Kubernetes modules take most of a cold build.
plugins:
	$(GIT_TRUST) $(GO) build $(GOFLAGS_BUILD) -o $(BIN)/ ./plugins/... ./cmd/cdictl

# The node image (Containerfile, deploy/): the static binaries of bin/ and
# the licenses they need (scripts/licenses.sh), FROM scratch, so it needs
# no network. Its build context is a staged copy of exactly those, never
# bin/ itself (which may hold deb/ and other build outputs).
#
# It is tagged with the version (VERSION, as stamped into the binaries),
# not a fixed :dev, so that a node which has an earlier build pulls the
# new one. IMAGE names it otherwise.
IMAGE_REPO   ?= localhost/cdi-exec/plugins
IMAGE_TAG    ?= $(or $(VERSION),dev)
IMAGE        ?= $(IMAGE_REPO):$(IMAGE_TAG)
PODMAN       ?= podman
PODMAN_FLAGS ?=
IMAGE_STAGE  := $(BIN)/image-stage
image: build
	rm -rf "$(IMAGE_STAGE)" && mkdir -p "$(IMAGE_STAGE)/bin"
	cp $(addprefix $(BIN)/,$(PLUGINS) $(TOOLS)) "$(IMAGE_STAGE)/bin/"
	scripts/licenses.sh "$(IMAGE_STAGE)/licenses" $(addprefix $(BIN)/,$(PLUGINS) $(TOOLS))
	$(PODMAN) $(PODMAN_FLAGS) build --pull=never --network=none -f Containerfile -t $(IMAGE) "$(IMAGE_STAGE)"; \
	  status=$$?; rm -rf "$(IMAGE_STAGE)"; exit $$status

# The Helm chart packaged into $(BIN)/cdi-exec-plugins-<version>.tgz: its
# version is VERSION without the v (SemVer, as helm wants: 0.0.0 when
# there is none), its appVersion, the image tag it defaults to, the tag
# make image gives. Needs helm: on the PATH, or make helm's.
CHART_VERSION ?= $(patsubst v%,%,$(or $(VERSION),v0.0.0))
CHART_HELM    ?= $(or $(shell command -v helm 2>/dev/null),$(HELM))
chart:
	$(CHART_HELM) package deploy/helm/cdi-exec-plugins --version "$(CHART_VERSION)" --app-version "$(IMAGE_TAG)" -d "$(BIN)"

install: build
	install -d "$(PLUGINDIR)" "$(TOOLDIR)"
	install -m 0755 $(addprefix $(BIN)/,$(PLUGINS)) "$(PLUGINDIR)/"
	install -m 0755 $(addprefix $(BIN)/,$(TOOLS)) "$(TOOLDIR)/"

# Copies conf/<type>.d/*.conf to $(CONFDIR)/<type>.d/, never overwriting a
# file that is there; conf/examples/ is never installed.
install-conf:
	@for f in $(CONFS); do \
	  d="$(DESTDIR)$(CONFDIR)/$$(basename "$$(dirname "$$f")")"; t="$$d/$$(basename "$$f")"; \
	  if [ -e "$$t" ] || [ -L "$$t" ]; then echo "skipped $$t: it exists"; continue; fi; \
	  install -d "$$d" && install -m 0644 "$$f" "$$t" && echo "installed $$t" || exit 1; \
	done

# Removes exactly the binaries install put there, and $(PREFIX)/bin and
# $(PREFIX) if that leaves them empty. Configs and state stay.
uninstall:
	rm -f $(addprefix "$(PLUGINDIR)"/,$(PLUGINS)) $(addprefix "$(TOOLDIR)"/,$(TOOLS))
	@for d in "$(PLUGINDIR)" "$(DESTDIR)$(PREFIX)"; do \
	  if [ -d "$$d" ]; then rmdir --ignore-fail-on-non-empty "$$d"; fi; \
	done

# A Debian package of the binaries and configs (conffiles), built with nfpm
# from a staged tree; third-party license files are gathered beside ours.
DEB_VERSION ?= $(shell scripts/version.sh --deb)
DEB_ARCH    ?= $(shell $(GO) env GOARCH)
DEB_STAGE   := $(BIN)/deb-stage
deb: build
	rm -rf "$(DEB_STAGE)" "$(BIN)/deb" && mkdir -p "$(BIN)/deb"
	$(MAKE) --no-print-directory -o build install install-conf DESTDIR="$(DEB_STAGE)" BINPREFIX=/usr/bin >/dev/null
	scripts/licenses.sh "$(DEB_STAGE)/usr/share/doc/cdi-exec-plugins" $(addprefix $(BIN)/,$(PLUGINS) $(TOOLS))
	cp -r conf/examples "$(DEB_STAGE)/usr/share/doc/cdi-exec-plugins/examples"
	mkdir -p "$(DEB_STAGE)/usr/share/bash-completion/completions" "$(DEB_STAGE)/usr/share/zsh/vendor-completions" "$(DEB_STAGE)/usr/share/fish/vendor_completions.d"
	$(BIN)/cdictl completion bash >"$(DEB_STAGE)/usr/share/bash-completion/completions/cdictl"
	$(BIN)/cdictl completion zsh >"$(DEB_STAGE)/usr/share/zsh/vendor-completions/_cdictl"
	$(BIN)/cdictl completion fish >"$(DEB_STAGE)/usr/share/fish/vendor_completions.d/cdictl.fish"
	cd "$(DEB_STAGE)" && DEB_VERSION="$(DEB_VERSION)" DEB_ARCH="$(DEB_ARCH)" \
	  $(GO) run $(NFPM) package --config "$(CURDIR)/packaging/nfpm.yaml" --packager deb --target "$(abspath $(BIN))/deb/"
	rm -rf "$(DEB_STAGE)"

# Every go test run goes through test/testreport: it shows each skipped
# test with its reason and each failure's output, and under CI=true fails
# on a skip that test/skips.allow does not name (docs/testing.md#skips).
REPORT := $(GO) run ./test/testreport --

# The whole suite: lint, unit tests, fuzz seed corpora and the end-to-end
# tests against the binaries in $(BIN)/. The Helm chart's tests render it
# with helm.
test: build lint helm
	$(call guarded,CDI_TEST_BIN_DIR=$(abspath $(BIN)) CDI_TEST_HELM=$(HELM) $(REPORT) $(GO) test -json -count=1 ./...)

# helm, built from its Go module into the real-node tools' cache (pinned in
# test/k8s/build-tools.sh; 299 s the first time on a loaded 2-core machine).
E2E_CACHE := $(or $(CDI_E2E_CACHE),$(HOME)/.cache/cdi-e2e)
HELM      := $(E2E_CACHE)/bin/helm
helm:
	./test/k8s/build-tools.sh helm

# deploy/ is rendered from the chart (deploy/helm/cdi-exec-plugins): after
# changing the chart, this writes deploy/ anew; make test fails until then.
manifests: helm
	CDI_TEST_HELM=$(HELM) $(GO) test -count=1 -run TestChartRendersDeploy ./test/manifests -update

# govulncheck over the module when its database can be reached; it
# reports and never fails (scripts/vulncheck.sh).
vulncheck:
	scripts/vulncheck.sh

# The end-to-end tests E2E_COUNT more times (CI runs it after test), so
# that a flaky test fails instead of slipping through.
E2E_COUNT ?= 3
e2e-repeat: build
	$(call guarded,CDI_TEST_BIN_DIR=$(abspath $(BIN)) $(REPORT) $(GO) test -json -count=$(E2E_COUNT) ./test/e2e)

# Builds the Debian package and installs it into a throwaway root
# (test/install). Separate from `make test` because the first run builds
# nfpm; CI runs both.
test-deb: deb
	$(call guarded,CDI_TEST_BIN_DIR=$(abspath $(BIN)) CDI_TEST_DEB=$(abspath $(BIN)/deb) $(REPORT) $(GO) test -json -count=1 -run TestDeb ./test/install)

# Tests never touch the live node: guarded runs a test command with the
# node's CDI directories listed (names, types, modes, owners, sizes, times,
# content hashes) before and after, and fails if anything changed.
LIVE_CDI_DIRS := /etc/cdi /var/lib/cdi /var/run/cdi
LIVE_CDI_LIST = for d in $(LIVE_CDI_DIRS); do \
	  if [ -e "$$d" ]; then find -H "$$d" -printf '%p %y %m %U:%G %s %T@\n' -type f -exec sha256sum {} +; \
	  else echo "$$d absent"; fi; \
	done | LC_ALL=C sort
define guarded
	@before=$$(mktemp) && $(LIVE_CDI_LIST) >"$$before" && echo '$(1)' && \
	{ $(1); status=$$?; } && \
	$(LIVE_CDI_LIST) | diff -u "$$before" - >"$$before.diff"; changed=$$?; \
	if [ $$changed != 0 ]; then echo "tests changed the live node's CDI directories:"; cat "$$before.diff"; fi; \
	rm -f "$$before" "$$before.diff"; [ $$changed = 0 ] && exit $$status; exit 1
endef

# The real-node suites (docs/kubernetes.md, "Testing on a real node"): a
# pinned containerd and kubelet, then a control plane too. The tools are
# built once into $CDI_E2E_CACHE (default ~/.cache/cdi-e2e), at the
# pinned release or K8S_VERSION (K8S_VERSION=v1.35.4 make e2e-cluster for
# the oldest supported). E2E_FLAGS come last: E2E_FLAGS="-count=5 -run
# TestClusterDRAFeatures" repeats one test. Needs root; without what a
# node needs, the tests skip and say why (and fail CI). Their output
# streams as it comes: they run for many minutes.
E2E_FLAGS ?=
E2E_TEST  := CDI_TEST_BIN_DIR=$(CURDIR)/bin $(GO) run ./test/testreport -stream -- $(GO) test -json -tags e2enode -count=1 -timeout 45m

e2e-node: build
	./test/k8s/build-tools.sh
	$(call guarded,$(E2E_TEST) -run ^TestNode $(E2E_FLAGS) ./test/k8s/...)

e2e-cluster: build
	./test/k8s/build-tools.sh
	$(call guarded,$(E2E_TEST) -run ^TestCluster $(E2E_FLAGS) ./test/k8s/...)

# Pod start without a claim, with a one-tty DRA claim and with a claim of
# the floor driver (test/k8s/floordriver), one at a time and in batches,
# and the drivers' prepare latency (docs/performance.md, "Pod
# start with a claim"), on the real node as e2e-cluster runs it; not run
# in CI. BENCH_K8S_RUNS, BENCH_K8S_BATCHES, BENCH_K8S_BATCH and BENCH_K8S_DRIVER_ARGS (from the
# environment) size it; BENCH_K8S_STRICT=1 fails on a missed target;
# BENCH_K8S_FLAGS go to go test.
BENCH_K8S_FLAGS ?=
bench-k8s: build
	./test/k8s/build-tools.sh
	$(call guarded,$(E2E_TEST) -v -run ^TestBench -skip ^TestBenchScale$$ $(BENCH_K8S_FLAGS) ./test/k8s/...)

# A simulated cluster on one real control plane, with no kubelet
# (docs/performance.md, "Scale"): BENCH_SCALE_NODES (100) nodes, each a
# Node object and a cdi-kubelet-plugin dra process on a fixture host of
# its own, as many nodes of the floor driver, and BENCH_SCALE_PODS (200)
# pods a scheduling scenario; not run in CI. BENCH_SCALE_ROUNDS,
# BENCH_SCALE_CLAIMS, BENCH_SCALE_IDLE_SECONDS, BENCH_SCALE_START and
# BENCH_SCALE_DRIVER_FLAGS (from the environment) change the rest;
# BENCH_SCALE_STRICT=1 fails on a missed target; BENCH_SCALE_FLAGS go to
# go test.
BENCH_SCALE_FLAGS ?=
bench-scale: build
	./test/k8s/build-tools.sh
	$(call guarded,$(E2E_TEST) -v -run "^TestBench(Scale|Metric)" $(BENCH_SCALE_FLAGS) ./test/k8s/...)

# make demo-k8s (as root): a one-node cluster of this machine from the
# real-node tools (built once, cached), the image imported into its
# containerd, the chart installed with helm, the tty examples of
# deploy/example/ applied; it prints what each pod asked for and got, then
# tears everything down (test/k8s TestDemoK8s). KEEP=1 keeps the cluster
# up, printing its KUBECONFIG, until Ctrl-C.
demo-k8s: build
	./test/k8s/build-tools.sh
	$(GO) test -c -tags e2enode -o "$(abspath $(BIN))/demo-k8s.test" ./test/k8s
	$(call guarded,cd test/k8s && CDI_TEST_BIN_DIR=$(abspath $(BIN)) CDI_DEMO_KEEP=$(KEEP) "$(abspath $(BIN))/demo-k8s.test" -test.run "^TestDemoK8s$$" -test.count 1 -test.timeout $(if $(filter 1,$(KEEP)),0,30m))

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

# KEEP=1 keeps the demo hosts and prints the environment to go on with
# them. It builds only what it runs (plugins).
KEEP ?=
demo: plugins
	KEEP=$(KEEP) BIN=$(BIN) ./scripts/demo.sh

# Go benchmarks of the hot functions, then whole invocations against an
# exec floor (docs/performance.md). BENCH_RUNS sets runs per scenario.
BENCH_RUNS ?= 300
bench: build
	$(GO) test -run '^$$' -bench . -benchtime 1s ./pkg/... ./internal/... ./plugins/...
	$(GO) run ./test/bench -bin $(BIN) -n $(BENCH_RUNS)

# Runs every fuzz target for FUZZTIME each.
fuzz:
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; \
	    $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

clean:
	rm -rf $(BIN)
