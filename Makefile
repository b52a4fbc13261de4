# The targets README.md and .ci/run call. Extend the bench target by adding
# prerequisites to BENCH_TARGETS (for example a bench-llmq target that runs
# `llmq bench`).

GO        ?= go
BIN       ?= bin/llmq
FUZZTIME  ?= 10s
BENCHTIME ?= 1s

BENCH_TARGETS ?= bench-go bench-llmq

.PHONY: all build test lint vet fmt-check unit fuzz bench bench-go bench-llmq demo run migrate clean

all: build

## build: the single binary, bin/llmq
build:
	$(GO) build -o $(BIN) ./cmd/llmq

## test: what CI runs: vet, gofmt check, the race-enabled tests, a brief fuzz
test: lint unit fuzz

## lint: go vet and the gofmt check
lint: vet fmt-check

vet:
	$(GO) vet ./...

fmt-check:
	@out="$$(gofmt -l .)"; \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

unit:
	$(GO) test -race -count=1 ./...

## fuzz: FuzzDecode for FUZZTIME (default 10s)
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) .

## bench: every benchmark target in BENCH_TARGETS
bench: $(BENCH_TARGETS)

## bench-go: the Go benchmarks of every package
bench-go:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) ./...

## bench-llmq: the seeds' experiments against the simulator (about 6 min), report in docs/bench
bench-llmq:
	$(GO) run ./cmd/llmq bench --out docs/bench

## demo: the whole pipeline in one process on embedded defaults (under 2 min)
demo:
	$(GO) run ./cmd/llmq demo

## migrate: create and migrate the database of LLMQ_DATABASE_URL
migrate: build
	$(BIN) migrate

## run: migrate, then run the worker against the local services
run: migrate
	$(BIN) worker

clean:
	rm -rf bin
