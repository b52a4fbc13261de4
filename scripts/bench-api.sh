#!/usr/bin/env bash
# bench-api.sh: enqueue throughput and latency of POST /v1/jobs under wrk,
# for each broker (RabbitMQ, and Kafka as the in-process kfake cluster that
# LLMQ_BROKER=embedded starts). No worker runs: this measures admission,
# the Postgres insert and the broker publish + confirm only.
#
#   scripts/bench-api.sh [duration] [connections] [jobs-per-request]
#
# Needs wrk (apt-get install wrk), Postgres at 127.0.0.1:5432 and RabbitMQ at
# 127.0.0.1:5672. Uses a scratch database llmq_bench_api (dropped at the end).
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-10s}
conns=${2:-16}
perreq=${3:-1}
port=18181
bin=$(mktemp -d)/llmq
go build -o "$bin" ./cmd/llmq
db=llmq_bench_api
export LLMQ_DATABASE_URL="postgres://postgres@127.0.0.1:5432/$db?sslmode=disable"
export LLMQ_API_KEYS="bench-key:bench"
cfg=$(mktemp --suffix .yaml)
# Thresholds far above what a run enqueues: no worker drains the queue.
printf 'backpressure:\n  soft_depth: 5000000\n  hard_depth: 10000000\n' >"$cfg"
export LLMQ_CONFIG="$cfg"

job='{"body":{"model":"gpt-4o-mini","max_tokens":64,"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Summarise the token bucket algorithm in one sentence."}]}}'
body=$job
if [ "$perreq" -gt 1 ]; then
  body='{"jobs":['$job
  for _ in $(seq 2 "$perreq"); do body=$body,$job; done
  body=$body']}'
fi
lua=$(mktemp --suffix .lua)
cat >"$lua" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer bench-key"
wrk.body = [[$body]]
LUA

run() { # name broker-url
  local name=$1
  export LLMQ_BROKER=$2
  psql -q -h 127.0.0.1 -U postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" postgres >/dev/null
  "$bin" migrate >/dev/null
  "$bin" api --listen 127.0.0.1:$port 2>"/tmp/bench-api-$name.log" &
  local pid=$!
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.1; done
  # Warm up (topic/queue creation, connection pools).
  wrk -t1 -c2 -d2s -s "$lua" "http://127.0.0.1:$port/v1/jobs" >/dev/null
  echo "== $name: wrk -t2 -c$conns -d$duration --latency ($perreq job(s) per request)"
  wrk -t2 -c"$conns" -d"$duration" --latency -s "$lua" "http://127.0.0.1:$port/v1/jobs"
  local jobs
  jobs=$(psql -qtA -h 127.0.0.1 -U postgres -c "SELECT count(*) FROM jobs WHERE published_at IS NOT NULL" "$db")
  echo "jobs recorded and published: $jobs"
  kill "$pid"; wait "$pid" || true
}

queue="llmq.bench.$(date +%s)"
run rabbitmq "amqp://guest:guest@127.0.0.1:5672/?queue=$queue"
run kafka-kfake embedded
rabbitmqctl -q delete_queue "$queue" >/dev/null 2>&1 || true
psql -q -h 127.0.0.1 -U postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" postgres >/dev/null
rm -f "$cfg" "$lua"
