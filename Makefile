# The targets README.md and .ci/run call. Extend the bench target by adding
# prerequisites to BENCH_TARGETS (for example a bench-llmq target that runs
# `llmq bench`).

# bash with pipefail: a benchmark piped to tee fails its target when it fails.
SHELL       := bash
.SHELLFLAGS := -o pipefail -c

GO        ?= go
BIN       ?= bin/llmq
# A count of runs, not a duration: with a duration go1.26's fuzzing coordinator may report its own
# deadline as a failure (golang/go#75804, fixed in go1.27). 300,000 runs take about 10 s here.
FUZZTIME  ?= 300000x
# FuzzIngest runs the worker's ingest on a real Postgres: 2,000 runs take about 10 s here.
INGEST_FUZZTIME ?= 2000x
BENCHTIME ?= 1s

BENCH_TARGETS ?= bench-go bench-llmq

.PHONY: all help build test lint vet staticcheck fmt-check unit fuzz bench bench-go bench-llmq bench-throughput bench-million bench-enqueue mutate demo console-screenshots run migrate clean soak

all: build

## help: list the targets and what each does
help:
	@sed -n 's/^## //p' $(MAKEFILE_LIST) | awk '{ i = index($$0, ": "); printf "  %-11s %s\n", substr($$0, 1, i - 1), substr($$0, i + 2) }'

## build: the single binary, bin/llmq
build:
	$(GO) build -o $(BIN) ./cmd/llmq

## test: what CI runs: vet, gofmt check, the race-enabled tests, a brief fuzz
test: lint unit fuzz

STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2

## lint: go vet, the gofmt check and staticcheck
lint: vet fmt-check staticcheck

## vet: go vet ./...
vet:
	$(GO) vet ./...

## staticcheck: staticcheck ./... (the pinned version, fetched from the module proxy)
staticcheck:
	$(GO) run $(STATICCHECK) ./...

## fmt-check: fail when a file is not gofmt'ed
fmt-check:
	@out="$$(gofmt -l .)"; \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

## unit: go test -race ./... (Postgres and RabbitMQ on localhost), the worker's package first
# go test runs the packages in the order listed, two at a time here: the worker's, the longest (about
# 4.5 min), started last and then ran alone; started first, the others run beside it (the unit tests
# took 421 s where they took 561 s, on 2 cores).
unit:
	$(GO) test -race -count=1 ./worker ./...

## fuzz: FuzzDecode for FUZZTIME (default 300000x: runs, about 10 s), then FuzzIngest (any bytes through the memory broker into a worker on Postgres) for INGEST_FUZZTIME (default 2000x)
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) .
	$(GO) test -run '^$$' -fuzz '^FuzzIngest$$' -fuzztime $(INGEST_FUZZTIME) ./worker

## bench: every benchmark target in BENCH_TARGETS
bench: $(BENCH_TARGETS)

## bench-go: the Go benchmarks of every package
bench-go:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) ./...

## bench-llmq: the design notes' experiments against the simulator (about 20 min), report in docs/bench
bench-llmq:
	$(GO) run ./cmd/llmq bench --out docs/bench

## bench-throughput: llmq's own overhead (instant upstream): the pipeline (memory, Kafka, RabbitMQ) and single-job POST /v1/jobs benchmarks, then `llmq bench --only throughput`; figures in docs/bench/throughput
bench-throughput:
	mkdir -p docs/bench/throughput
	$(GO) test -run '^$$' -bench '^BenchmarkPipeline$$' -benchtime 20000x ./worker | tee docs/bench/throughput/go-bench.txt
	$(GO) test -run '^$$' -bench '^BenchmarkEnqueue$$' -benchtime 10000x ./internal/app/api | tee -a docs/bench/throughput/go-bench.txt
	$(GO) run ./cmd/llmq bench --only throughput --out docs/bench/throughput

## bench-million: a backlog of 1,000,000 jobs queued in Postgres: the worker's memory at 10k, 100k and 1M (BenchmarkBacklogMemory), then the API's reads over HTTP (`llmq bench --only million`); figures in docs/bench/million
bench-million:
	mkdir -p docs/bench/million
	$(GO) test -run '^$$' -bench '^BenchmarkBacklogMemory$$' -benchtime 1x ./worker | tee docs/bench/million/go-bench.txt
	$(GO) run ./cmd/llmq bench --only million --out docs/bench/million

## bench-enqueue: the enqueue side (docs/bench/enqueue.md): single-job POST /v1/jobs, the Postgres and RabbitMQ ceilings of the writes a job needs, and `llmq produce` of 1,000,000 lines (scripts/bench-produce.sh)
bench-enqueue:
	$(GO) test -run '^$$' -bench '^BenchmarkEnqueue$$' -benchtime 20000x ./internal/app/api
	$(GO) test -run '^$$' -bench '^BenchmarkOutbox$$' -benchtime 200000x ./store
	$(GO) test -run '^$$' -bench '^BenchmarkPublish(Quorum|Classic)$$' -benchtime 200000x ./transport/rabbitmq
	scripts/bench-produce.sh 1000000

SOAK_DURATION ?= 15m
SOAK_SEED     ?= $(shell od -An -N2 -tu2 /dev/urandom | tr -d ' ')
# SOAK_FLAGS: more llmq soak flags, e.g. --postgres-control "pg_ctlcluster --skip-systemctl-redirect 15 main"
SOAK_FLAGS    ?=

## soak: 3 workers, 2 API replicas, the simulator and kfake under load and overlapping faults for SOAK_DURATION (15m), replayable from SOAK_SEED; checks every promise, exits 1 when one fails (docs/bench/soak.md); not in test
soak: build
	$(BIN) soak --duration $(SOAK_DURATION) --seed $(SOAK_SEED) $(SOAK_FLAGS)

## mutate: mutation testing (gremlins) of shaping, the job contract and the worker's policy; slow, not in test (docs/mutation.md)
mutate:
	scripts/mutate.sh

## demo: the whole pipeline in one process on embedded defaults (under 2 min)
demo:
	$(GO) run ./cmd/llmq demo

## console-screenshots: run the console's browser test (chromium) and save its screenshots in docs/console
console-screenshots:
	LLMQ_CONSOLE_SCREENSHOTS=$(CURDIR)/docs/console $(GO) test -count=1 -run '^TestConsoleInBrowser$$' ./internal/app/console/

## migrate: create and migrate the database of LLMQ_DATABASE_URL
migrate: build
	$(BIN) migrate

## run: migrate, then run the worker against the local services
run: migrate
	$(BIN) worker

## clean: remove bin/
clean:
	rm -rf bin
