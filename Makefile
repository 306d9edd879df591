# CDI exec plugins. `make demo` shows the suite on a bundled fixture host;
# `make test` is what CI runs.

GO          ?= go
PREFIX      ?= /opt/cdi
DESTDIR     ?=
BINDIR      := $(DESTDIR)$(PREFIX)/bin
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
FUZZTIME    ?= 20s

export CGO_ENABLED := 0
GOFLAGS_BUILD := -trimpath -ldflags "-s -w"

.PHONY: all build install test e2e-repeat e2e-node e2e-cluster unit lint demo bench fuzz clean

all: build

build:
	$(GO) build $(GOFLAGS_BUILD) -o bin/ ./plugins/... ./cmd/...

install: build
	install -d $(BINDIR)
	install -m 0755 bin/* $(BINDIR)/

# The whole suite: lint, unit tests, fuzz seed corpora and the end-to-end
# tests against the binaries in bin/.
test: build lint
	$(call guarded,CDI_TEST_BIN_DIR=$(CURDIR)/bin $(GO) test -count=1 ./...)

# The end-to-end tests E2E_COUNT more times (CI runs it after test), so
# that a flaky test fails instead of slipping through.
E2E_COUNT ?= 3
e2e-repeat: build
	$(call guarded,CDI_TEST_BIN_DIR=$(CURDIR)/bin $(GO) test -count=$(E2E_COUNT) ./test/e2e)

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
# built once into $CDI_E2E_CACHE (default ~/.cache/cdi-e2e). Needs root;
# without what a node needs, the tests skip and say why.
E2E_FLAGS ?=
E2E_TEST  := CDI_TEST_BIN_DIR=$(CURDIR)/bin $(GO) test -tags e2enode -count=1 -timeout 45m -v $(E2E_FLAGS)

e2e-node: build
	./test/k8s/build-tools.sh
	$(call guarded,$(E2E_TEST) -run ^TestNode ./test/k8s/...)

e2e-cluster: build
	./test/k8s/build-tools.sh
	$(call guarded,$(E2E_TEST) -run ^TestCluster ./test/k8s/...)

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

demo: build
	./scripts/demo.sh

# Go benchmarks of the hot functions, then whole invocations against an
# exec floor (docs/performance.md). BENCH_RUNS sets runs per scenario.
BENCH_RUNS ?= 300
bench: build
	$(GO) test -run '^$$' -bench . -benchtime 1s ./pkg/... ./plugins/...
	$(GO) run ./test/bench -bin bin -n $(BENCH_RUNS)

# Runs every fuzz target for FUZZTIME each.
fuzz:
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; \
	    $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

clean:
	rm -rf bin
