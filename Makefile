# Targets need Go and a redis-server binary (Debian: apt-get install -y redis-server),
# or REDIS_ADDR pointing at a Redis the tests may use (fault-injection tests still
# start their own redis-server).
GO ?= go
# bash, for pipefail: make test pipes go test into its progress printer.
SHELL := /bin/bash
DOCKER_HELPER := internal/redistest/dockerredis
# OpenTelemetry instrumentation: a module of its own, so that the library's
# users who do not want otel do not get it in their go.sum.
OTEL_MODULE := relockotel

.PHONY: demo test check-go-floor bench bench-kinds bench-cluster bench-names bench-entity chaos check-redis

# $(call beat,WHAT,COMMAND): runs COMMAND, printing "... still running: WHAT (Ns)"
# every 8s while it runs, so that a long compile (go vet or a first build on a
# cold cache) never leaves the terminal silent; exits with COMMAND's status.
beat = { $(2) ; } & pid=$$!; s=0; \
	while kill -0 $$pid 2>/dev/null; do sleep 1; s=$$((s+1)); \
	if [ $$((s % 8)) -eq 0 ]; then echo "... still running: $(1) ($${s}s)"; fi; done; wait $$pid

check-redis:
	@if [ -z "$$REDIS_ADDR" ] && ! command -v redis-server >/dev/null 2>&1; then \
		echo "redis-server not found: install it (Debian/Ubuntu: sudo apt-get install -y redis-server)"; \
		echo "or set REDIS_ADDR=host:port to use a running Redis."; \
		exit 1; \
	fi

## demo: hot lock handed over by rlock.Mutex vs a SET NX spin loop, side by side
# go build -v names each package as it compiles it, so the first build (about
# 50s on a cold cache) shows its progress; then the binary runs.
demo: check-redis
	@echo "building the demo (the first build compiles the dependencies: about a minute; packages listed as they compile)..."
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	$(call beat,building the demo,$(GO) build -v -o "$$tmp/rlock-demo" ./cmd/rlock-demo) || exit $$?; \
	echo "built; running the demo"; "$$tmp/rlock-demo"

## test: vet, formatting, and every test with the race detector against real Redis
test: check-redis
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	@echo "go vet ./..."; $(call beat,go vet,$(GO) vet ./...)
	@$(GO) mod tidy -diff >/dev/null || { echo "go.mod/go.sum are not tidy: run go mod tidy"; $(GO) mod tidy -diff; exit 1; }
	@# The Docker fallback's helper is a module of its own (see internal/redistest/container.go).
	@echo "go -C $(DOCKER_HELPER) vet ./..."; $(call beat,go vet of the Docker helper,$(GO) -C $(DOCKER_HELPER) vet ./...)
	@$(GO) -C $(DOCKER_HELPER) mod tidy -diff >/dev/null || { echo "$(DOCKER_HELPER)/go.mod is not tidy: run go mod tidy there"; $(GO) -C $(DOCKER_HELPER) mod tidy -diff; exit 1; }
	@echo "go -C $(OTEL_MODULE) vet ./..."; $(call beat,go vet of relockotel,$(GO) -C $(OTEL_MODULE) vet ./...)
	@$(GO) -C $(OTEL_MODULE) mod tidy -diff >/dev/null || { echo "$(OTEL_MODULE)/go.mod is not tidy: run go mod tidy there"; $(GO) -C $(OTEL_MODULE) mod tidy -diff; exit 1; }
	@# One line per finished test and package (this module's and relockotel's), a
	@# heartbeat when nothing finished for 8s, failures in full; pipefail and the
	@# group's status keep go test's exit status.
	set -o pipefail; { $(GO) test -json -race -count=1 -timeout 15m ./...; a=$$?; \
		$(GO) -C $(OTEL_MODULE) test -json -race -count=1 -timeout 5m ./...; b=$$?; exit $$((a | b)); } \
		| $(GO) run ./internal/testprogress

## check-go-floor: build and vet with the oldest Go that go.mod's go directive
## allows, when it is not the toolchain in use (it is fetched from the module
## proxy on first use)
check-go-floor:
	@floor=go$$(awk '$$1 == "go" { print $$2; exit }' go.mod); \
	if [ "$$floor" = "$$($(GO) env GOVERSION)" ]; then echo "go.mod's go directive is the toolchain in use: nothing more to check"; exit 0; fi; \
	echo "building and vetting with $$floor, the go directive of go.mod"; \
	GOTOOLCHAIN=$$floor $(GO) build ./... && GOTOOLCHAIN=$$floor $(GO) vet ./...

## bench: every lock contender side by side against one Redis (about 13 minutes; BENCH_FLAGS=-quick for 2-3)
bench: check-redis
	cd bench && $(GO) run -mod=mod . $(BENCH_FLAGS)

## bench-kinds: RWMutex, FIFO mode, MultiLock and the quorum lock beside their
## closest peers (about 2 minutes; KINDS_FLAGS=-quick for 1)
bench-kinds: check-redis
	cd bench && $(GO) run -mod=mod ./kinds $(KINDS_FLAGS)

## bench-cluster: rlock.Mutex (sharded and classic pub/sub) and a SET NX spin loop on a
## 1-master and a 3-master Redis Cluster and on one server: distinct-lock throughput,
## hot-lock hand-offs and cluster-bus publish messages per acquisition (about 2.5
## minutes; CLUSTER_FLAGS=-quick for under 1). Needs redis-server; writes bench/results/cluster.json.
bench-cluster: check-redis
	cd bench && $(GO) run -mod=mod . -scenarios cluster $(CLUSTER_FLAGS)

## bench-names: Redis memory per lock name: 1,000,000 distinct names locked once each,
## 100,000 of them held at once; used_memory held, idle and after the idle bound (about
## 2.5 minutes; NAMES_FLAGS=-names-count=100000 for under 1). Needs redis-server (its own
## throwaway server); writes bench/results/names.json.
bench-names:
	@command -v redis-server >/dev/null 2>&1 || { echo "redis-server not found: the names bench measures its own throwaway server"; exit 1; }
	cd bench && $(GO) run -mod=mod . -scenarios names $(NAMES_FLAGS)

## bench-entity: uncontended per-entity locks (issue #28), every contender: a new lock
## name for every acquisition (entity-new) and a name per goroutine re-locked in a loop
## (entity-own), each on 1 goroutine, 16 goroutines on one Client and 16 processes;
## acq/s, Redis commands and CPU per Lock+Unlock against the peers (about 3 minutes;
## ENTITY_FLAGS=-quick for under 1). Writes bench/results/entity.json and entity.png.
bench-entity: check-redis
	cd bench && $(GO) run -mod=mod . -scenarios entity-new,entity-own $(ENTITY_FLAGS)

## chaos: the full fault-injection suite (several minutes): Mutex, semaphore and
## RWMutex workloads in worker processes under killed connections, Redis restarts and
## stalls, paused holders, a cut-off watchdog and lost wake-ups. Prints the
## figures and writes them to chaos/RESULTS.md.
chaos: check-redis
	$(GO) test -race -count=1 -run '^TestChaos$$' -timeout 30m ./chaos -chaos.full -chaos.results=RESULTS.md
	@cat chaos/RESULTS.md
