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

.PHONY: all build install test unit lint demo bench fuzz clean e2e-node e2e-cluster

all: build

build:
	$(GO) build $(GOFLAGS_BUILD) -o bin/ ./plugins/... ./cmd/...

install: build
	install -d $(BINDIR)
	install -m 0755 bin/* $(BINDIR)/

# The whole suite: lint, unit tests, fuzz seed corpora and the end-to-end
# tests against the binaries in bin/.
test: build lint
	CDI_TEST_BIN_DIR=$(CURDIR)/bin $(GO) test -count=1 ./...

# The real-node suites (docs/kubernetes.md, "Testing on a real node"): a
# pinned containerd and kubelet, then a control plane too. The tools are
# built once into $CDI_E2E_CACHE (default ~/.cache/cdi-e2e). Needs root;
# without what a node needs, the tests skip and say why.
E2E_FLAGS ?=
E2E_TEST  := CDI_TEST_BIN_DIR=$(CURDIR)/bin $(GO) test -tags e2enode -count=1 -timeout 45m -v $(E2E_FLAGS)

e2e-node: build
	./test/k8s/build-tools.sh
	$(E2E_TEST) -run '^TestNode' ./test/k8s/...

e2e-cluster: build
	./test/k8s/build-tools.sh
	$(E2E_TEST) -run '^TestCluster' ./test/k8s/...

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
