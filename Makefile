# Airlock. `make help` lists the targets.
GO       ?= go
PKG      ?= ./...
T        ?=
FUZZTIME ?= 30s
OPS      ?= 20000
SOAK_OPS ?= 1000000
DATA     ?= ./airlock-data
RUNFLAGS = $(if $(T),-run '$(T)',)

.PHONY: help build run test test-short bench bench-soak bench-cluster soak fuzz lint fmt tidy clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-11s %s\n", $$1, $$2}'

build: ## build bin/airlock
	$(GO) build -o bin/airlock ./cmd/airlock

run: build ## run Airlock: embedded NATS on 127.0.0.1:4222 (HTTP monitoring on 127.0.0.1:8222), metrics on 127.0.0.1:9090, the approver inbox on http://localhost:8080, data in ./airlock-data
	./bin/airlock serve --data $(DATA) --metrics 127.0.0.1:9090 --ui 127.0.0.1:8080

test: ## what CI runs: vet, format check, race tests
	$(GO) vet $(PKG)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) test -race -count=1 -timeout 30m $(RUNFLAGS) $(PKG)

test-short: ## fast tests only (no subprocess crash tests)
	$(GO) test -short -count=1 $(RUNFLAGS) $(PKG)

bench: build ## airlock bench (OPS=20000), every Go micro-benchmark, then the cluster benchmark
	./bin/airlock bench --ops $(OPS)
	$(GO) test -run '^$$' -bench . -benchmem $(PKG)
	$(MAKE) bench-cluster

bench-soak: build ## the pipeline for SOAK_OPS ops (1,000,000) in windows of 100,000: ops/s, CPU per op, p99, memory and AIRLOCK_OPS subjects as the work grows (about 10 minutes)
	./bin/airlock bench --ops $(SOAK_OPS) --window 100000 --holds -1 --execs -1 --audit-leaves -1 --results -1 --paced -1

bench-cluster: ## one node, a three-node loopback cluster with 1 and 3 Airlock processes, and a leader loss (about 3 minutes)
	AIRLOCK_BENCH_CLUSTER=1 $(GO) test -run '^$$' -bench '^BenchmarkCluster$$' -benchtime 1x -timeout 30m ./cmd/airlock/

# The soak's bounds; docs/operations.md has a run's figures.
SOAK_AIRLOCK_KILLS ?= 50
SOAK_NODE_KILLS    ?= 10
SOAK_LOAD          ?= 5m
SOAK_MAX_LOAD      ?= 30m

soak: ## the cluster chaos test until SOAK_AIRLOCK_KILLS and SOAK_NODE_KILLS kills (50 and 10) and SOAK_LOAD of load
	AIRLOCK_SOAK_AIRLOCK_KILLS=$(SOAK_AIRLOCK_KILLS) AIRLOCK_SOAK_NODE_KILLS=$(SOAK_NODE_KILLS) \
	AIRLOCK_SOAK_LOAD=$(SOAK_LOAD) AIRLOCK_SOAK_MAX_LOAD=$(SOAK_MAX_LOAD) \
	$(GO) test -race -count=1 -v -run '^TestClusterChaos$$' -timeout 90m ./cmd/airlock/

fuzz: ## run every fuzz target for FUZZTIME each
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

lint: ## vet and gofmt
	$(GO) vet $(PKG)
	gofmt -l .

fmt: ## gofmt the tree
	gofmt -w $$(git ls-files '*.go')

tidy: ## go mod tidy
	$(GO) mod tidy

clean: ## remove build output
	rm -rf bin
