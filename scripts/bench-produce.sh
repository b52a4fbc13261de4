#!/usr/bin/env bash
# bench-produce.sh: `llmq produce` of a generated JSONL file (about 200 bytes
# of prompt per job, each with an id) into RabbitMQ with no worker behind
# it: the publish rate and the RSS of the produce process at its start,
# middle and end (sampled every second), and its CPU and that of its
# Postgres backends per job. docs/bench/enqueue.md has the figures.
#
#   scripts/bench-produce.sh [lines] [extra produce flags...]
#
# Needs Postgres at 127.0.0.1:5432 and RabbitMQ at 127.0.0.1:5672 (and
# rabbitmqctl to delete the queue). Uses a scratch database and queue,
# both removed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
lines=${1:-1000000}
shift || true
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
go build -o "$dir/llmq" ./cmd/llmq
tag=llmq_bench_produce_$(date +%s)
export LLMQ_DATABASE_URL="postgres://postgres@127.0.0.1:5432/$tag?sslmode=disable"
export LLMQ_BROKER="amqp://guest:guest@127.0.0.1:5672/?queue=$tag"
# Thresholds far above what a run enqueues: no worker drains the queue.
printf 'models:\n  gpt-4o-mini: {}\nbackpressure: {soft_depth: 50000000, hard_depth: 100000000}\n' >"$dir/llmq.yaml"
export LLMQ_CONFIG="$dir/llmq.yaml"
prompt=$(printf 'Summarise this sentence in five words. %.0s' 1 2 3 4 5)
awk -v n="$lines" -v p="$prompt" 'BEGIN { for (i = 0; i < n; i++)
  printf "{\"id\":\"p-%d\",\"body\":{\"model\":\"gpt-4o-mini\",\"max_tokens\":32,\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}]}}\n", i, p }' >"$dir/jobs.jsonl"
"$dir/llmq" migrate >/dev/null

start=$(date +%s.%N)
"$dir/llmq" produce --file "$dir/jobs.jsonl" "$@" >"$dir/out" 2>"$dir/err" &
pid=$!
me=0 pg=0
: >"$dir/rss"
while kill -0 "$pid" 2>/dev/null; do
  rss=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)
  [ -n "$rss" ] && echo "$(echo "$(date +%s.%N) - $start" | bc) $rss" >>"$dir/rss"
  t=$(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || true)
  [ -n "$t" ] && me=$t
  sum=0
  for b in $(pgrep -f "postgres: .* $tag " || true); do
    x=$(awk '{print $14 + $15}' "/proc/$b/stat" 2>/dev/null || echo 0)
    sum=$((sum + x))
  done
  [ "$sum" -gt 0 ] && pg=$sum
  sleep 1
done
rc=0
wait "$pid" || rc=$?
elapsed=$(echo "$(date +%s.%N) - $start" | bc)
published=$(awk '/^published:/ {print $2}' "$dir/out")
n=$(wc -l <"$dir/rss")
at() { sed -n "${1}p" "$dir/rss" | awk '{printf "%.0f MB at %.0f s", $2 / 1024, $1}'; }
tps=$(getconf CLK_TCK)
echo "llmq produce of $lines lines: exit $rc, published ${published:-0} in ${elapsed%.*} s: $(echo "${published:-0} / $elapsed" | bc) jobs/s"
echo "RSS: start $(at 1), middle $(at $((n / 2 + 1))), end $(at "$n"); max $(awk '$2 > m {m = $2} END {printf "%.0f MB", m / 1024}' "$dir/rss")"
echo "CPU per job: llmq produce $((me * 1000000 / tps / ${published:-1})) us, its Postgres backends $((pg * 1000000 / tps / ${published:-1})) us (sampled each second)"
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
rabbitmqctl -q delete_queue "$tag" >/dev/null 2>&1 || true
psql -q -h 127.0.0.1 -U postgres -c "DROP DATABASE IF EXISTS $tag WITH (FORCE)" postgres >/dev/null
exit "$rc"
