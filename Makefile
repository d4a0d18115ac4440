# Airlock. `make help` lists the targets.
GO       ?= go
PKG      ?= ./...
T        ?=
FUZZTIME ?= 30s
OPS      ?= 20000
DATA     ?= ./airlock-data
RUNFLAGS = $(if $(T),-run '$(T)',)

.PHONY: help build run test test-short bench fuzz lint fmt tidy clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-11s %s\n", $$1, $$2}'

build: ## build bin/airlock
	$(GO) build -o bin/airlock ./cmd/airlock

run: build ## run Airlock: embedded NATS on 127.0.0.1:4222, metrics on 127.0.0.1:9090, data in ./airlock-data
	./bin/airlock serve --data $(DATA) --metrics 127.0.0.1:9090

test: ## what CI runs: vet, format check, race tests
	$(GO) vet $(PKG)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) test -race -count=1 -timeout 20m $(RUNFLAGS) $(PKG)

test-short: ## fast tests only (no subprocess crash tests)
	$(GO) test -short -count=1 $(RUNFLAGS) $(PKG)

bench: build ## airlock bench (OPS=20000) and every Go micro-benchmark
	./bin/airlock bench --ops $(OPS)
	$(GO) test -run '^$$' -bench . -benchmem $(PKG)

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
