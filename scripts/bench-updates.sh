#!/usr/bin/env bash
# bench-updates.sh: what a job's three updates (claim, call, result) cost
# Postgres, without the noise of a shared machine: replays the worker's
# statements for 20,480 jobs in chunks of 512 (insert, claim, call,
# result; each statement its own transaction, in one session) under
# EXPLAIN (ANALYZE, WAL, BUFFERS), and prints per job and update the WAL
# records and bytes and the buffers hit, then the HOT updates per job and
# the table's heap and index sizes (docs/design/platform.md).
#
#   scripts/bench-updates.sh [migrations to roll back] [fillfactor]
#
# With 1 it measures the schema before the newest migration; a fillfactor
# overrides the schema's. Needs jq and
# Postgres at 127.0.0.1:5432; uses a scratch database llmq_bench_updates
# (dropped at the end).
set -euo pipefail
cd "$(dirname "$0")/.."
down=${1:-0}
bin=$(mktemp -d)/llmq
go build -o "$bin" ./cmd/llmq
db=llmq_bench_updates
admin="postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
export LLMQ_DATABASE_URL="postgres://postgres@127.0.0.1:5432/$db?sslmode=disable"
psql "$admin" -qc "DROP DATABASE IF EXISTS $db"
trap 'psql "$admin" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)"' EXIT
"$bin" migrate >/dev/null
for _ in $(seq "$down"); do "$bin" migrate --down >/dev/null; done
# No autovacuum: an ANALYZE running meanwhile holds a snapshot, which keeps
# the pages from pruning what the claims left dead, and the figures would
# change with the machine's load.
psql "$LLMQ_DATABASE_URL" -qc "ALTER TABLE jobs SET (autovacuum_enabled = false)"
if [ -n "${2:-}" ]; then psql "$LLMQ_DATABASE_URL" -qc "ALTER TABLE jobs SET (fillfactor = $2)"; fi

jobs=20480 chunk=512
prompt=$(printf 'Summarise this sentence in five words. %.0s' 1 2 3 4 5)
ids() { echo "(SELECT 'bench-' || g FROM generate_series($1, $2) g)"; }
explain() { echo "\\echo $1"; echo "EXPLAIN (ANALYZE, WAL, BUFFERS, FORMAT JSON) $2;"; }
{
	for ((lo = 0; lo < jobs; lo += chunk)); do
		hi=$((lo + chunk - 1))
		echo "INSERT INTO jobs (tenant, id, status, priority, requested_model, body, sched_key, est_prompt_tokens, est_output_tokens)
			SELECT 'default', 'bench-' || g, 'queued', 'normal', 'gpt-4o-mini', format('{\"model\":\"gpt-4o-mini\",\"max_tokens\":32,\"messages\":[{\"role\":\"user\",\"content\":\"$prompt%s\"}]}', g)::jsonb,
				now(), 60, 32 FROM generate_series($lo, $hi) g;"
		explain claim "UPDATE jobs SET status = 'running', lease_owner = 'w', lease_expires_at = now() + interval '2 minutes',
			lease_token = lease_token + 1, phase = 'waiting_for_quota', updated_at = clock_timestamp()
			WHERE tenant = 'default' AND id IN $(ids $lo $hi) AND status = 'queued'"
		explain call "UPDATE jobs SET status = 'running', phase = 'calling', attempts = attempts + 1,
			started_at = coalesce(started_at, clock_timestamp()), updated_at = clock_timestamp()
			WHERE tenant = 'default' AND id IN $(ids $lo $hi) AND status IN ('running', 'retrying')"
		explain result "UPDATE jobs SET status = 'succeeded', result = '{\"id\":\"chatcmpl-1\",\"choices\":[{\"message\":{\"role\":\"assistant\",\"content\":\"Five words summarise this sentence.\"}}],\"usage\":{\"prompt_tokens\":60,\"completion_tokens\":6}}',
			used_model = 'gpt-4o-mini', prompt_tokens = 60, completion_tokens = 6, finished_at = clock_timestamp(),
			lease_expires_at = NULL, phase = '', updated_at = clock_timestamp()
			WHERE tenant = 'default' AND id IN $(ids $lo $hi) AND status IN ('running', 'retrying')"
	done
	echo "SELECT pg_stat_force_next_flush();"
} | psql "$LLMQ_DATABASE_URL" -qAt -v ON_ERROR_STOP=1 | awk '
	/^(claim|call|result)$/ { kind = $0; next }
	/^\[/ { json = ""; collecting = 1 }
	collecting { json = json $0 }
	collecting && /^\]$/ { print kind "\t" json; collecting = 0 }' |
	jq -rR --argjson n "$jobs" 'split("\t") | {kind: .[0], plan: (.[1] | fromjson | .[0].Plan)}' |
	jq -rs --argjson n "$jobs" 'group_by(.kind)[] | "\(.[0].kind): WAL records \((map(.plan["WAL Records"]) | add) / $n * 100 | round / 100), WAL bytes \((map(.plan["WAL Bytes"]) | add) / $n | round), buffers hit \((map(.plan["Shared Hit Blocks"]) | add) / $n * 100 | round / 100) per job"'
psql "$LLMQ_DATABASE_URL" -qAt -F ' ' -c "SELECT 'HOT updates per job ' || round(n_tup_hot_upd::numeric / $jobs, 2),
	'heap ' || pg_size_pretty(pg_relation_size('jobs')), 'indexes ' || pg_size_pretty(pg_indexes_size('jobs'))
	FROM pg_stat_user_tables WHERE relid = 'jobs'::regclass"
