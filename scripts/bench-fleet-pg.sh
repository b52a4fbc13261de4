#!/usr/bin/env bash
# bench-fleet-pg.sh: what a fleet of `llmq worker` processes costs Postgres,
# by statement. For each fleet size, one API process and N worker processes
# (the built binary, each its own pool, ledger replica and scheduler) run on
# a scratch database and RabbitMQ queue, against `llmq sim` with an instant
# upstream and limits far above the load. A window with no job, then one
# with jobs produced at a steady rate (`llmq produce` fed RATE lines a
# second). For each window: Postgres's transactions (pg_stat_database), the
# CPU ticks of the database's backends from /proc by process (each process
# connects with its own application_name), and, when the server's log is
# readable, every statement the database ran (log_statement = all, set on
# the scratch database only), counted by shape and class.
# docs/design/scale.md has the figures.
#
#   scripts/bench-fleet-pg.sh [sizes] [rate] [idle-s] [load-s]
#   (defaults: "1 3 6" 50 15 30; PGLOG: the server's log file, default the
#   Debian one; LEDGER: the workers' --ledger-period, default 500ms)
#
# Needs Postgres at 127.0.0.1:5432 (superuser postgres, on this machine for
# /proc and the log) and RabbitMQ at 127.0.0.1:5672 (rabbitmqctl to delete
# the queue). Writes its tables to standard output, the raw files to
# $OUT (default a temporary directory, kept).
set -euo pipefail
cd "$(dirname "$0")/.."
sizes=${1:-"1 3 6"}
rate=${2:-50}
idle=${3:-15}
load=${4:-30}
pglog=${PGLOG:-/var/log/postgresql/postgresql-15-main.log}
ledger=${LEDGER:-500ms}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
bin=$out/llmq
go build -o "$bin" ./cmd/llmq
psql_() { psql -h 127.0.0.1 -U postgres -X -qAt "$@"; }
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

# ticks FILE: "pid app ticks" of the database's backends, now.
ticks() {
  psql_ -F ' ' -c "SELECT pid, application_name FROM pg_stat_activity WHERE datname = '$db'" |
    while read -r pid app; do
      t=$(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || true)
      [ -n "$t" ] && echo "$pid ${app:-other} $t"
    done >"$1"
}
xacts() { psql_ -c "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = '$db'"; }
logsize() { if [ -r "$pglog" ]; then stat -c %s "$pglog"; else echo 0; fi; }

# window NAME SECONDS: sample, wait, sample; writes NAME.* files.
window() {
  local name=$1 secs=$2
  ticks "$out/$tag.$name.t0"
  local x0 l0 s0
  x0=$(xacts) l0=$(logsize) s0=$(date +%s.%N)
  sleep "$secs"
  ticks "$out/$tag.$name.t1"
  local x1 l1 s1
  x1=$(xacts) l1=$(logsize) s1=$(date +%s.%N)
  local dt
  dt=$(echo "$s1 - $s0" | bc)
  echo "$dt $((x1 - x0))" >"$out/$tag.$name.xact"
  if [ -r "$pglog" ]; then
    dd if="$pglog" of="$out/$tag.$name.log" iflag=skip_bytes,count_bytes skip="$l0" count="$((l1 - l0))" status=none
  fi
}

# cpu NAME: CPU (cores) of the backends by process kind over the window.
cpu() {
  local dt
  dt=$(cut -d' ' -f1 "$out/$tag.$1.xact")
  awk -v dt="$dt" 'NR == FNR { t0[$1] = $3; next }
    { k = $2; sub(/-[0-9]+$/, "", k); c[k] += ($3 - t0[$1]) }
    END { for (k in c) printf "%s=%.3f ", k, c[k] / 100 / dt }' "$out/$tag.$1.t0" "$out/$tag.$1.t1"
}

# statements NAME: the database's statements in the window per second, by
# class, by process kind and class (NAME.byproc), and by shape (the first 90
# characters, NAME.shapes).
statements() {
  local f=$out/$tag.$1.log dt
  [ -s "$f" ] || return 0
  dt=$(cut -d' ' -f1 "$out/$tag.$1.xact")
  awk -v db="@$db " -v dt="$dt" -v shapes="$out/$tag.$1.shapes" -v byproc="$out/$tag.$1.byproc" '
    function emit() {
      if (sql == "") return
      s = sql; gsub(/[ \t]+/, " ", s); sub(/^ /, "", s)
      u = toupper(s)
      if (u ~ /QUOTA_LEDGER/) k = "ledger"
      else if (u ~ /DOOR_COUNTS/) k = "door_counts"
      else if (u ~ /LANE_RATES/) k = "lane_rates"
      else if (u ~ /^WITH RECURSIVE TENANTS/ || (u ~ /SKIP LOCKED/ && u ~ / JOBS /)) k = "claim"
      else if (u ~ /^WITH RECURSIVE (M|P\(M, T\)) AS/) k = "models_poll"
      else if (u ~ /^SELECT (\(SELECT )?COUNT\(\*\) FROM \(SELECT FROM JOBS WHERE STATUS = .QUEUED./) k = "queue_depth"
      else if (u ~ /FROM NOTIFICATIONS/) k = "outbox_poll"
      else if (u ~ /^INSERT INTO JOBS/) k = "insert_jobs"
      else if (u ~ /^(BEGIN|COMMIT|ROLLBACK)/ || u ~ /JOB_ATTEMPTS/ || u ~ /PG_NOTIFY/ || u ~ /^WITH (J|C) AS \(UPDATE JOBS/) k = "job_path"
      else if (u ~ /^UPDATE JOBS (J )?SET LEASE_EXPIRES_AT/) k = "leases"
      else if (u ~ /LEASE_OWNER = \x27\x27/ || u ~ /BUDGET_RESERVATIONS/) k = "reaper"
      else if (u ~ /^-- PING/) k = "ping"
      else if (u ~ /^(LISTEN|UNLISTEN)/) k = "listen"
      else k = "other"
      a = app[pid]; if (a == "") a = "other"; sub(/-[0-9]+$/, "", a)
      n[k]++; total++; bp[a " " k]++
      shape[k " | " substr(s, 1, 90)]++
      sql = ""
    }
    FILENAME ~ /\.t[01]$/ { app[$1] = $2; next }
    /^[0-9]{4}-[0-9]{2}-[0-9]{2} / {
      emit()
      if (index($0, db) && match($0, / LOG:  (statement|execute [^:]*): /)) {
        sql = substr($0, RSTART + RLENGTH)
        pid = $0; sub(/^[^[]*\[/, "", pid); sub(/\].*/, "", pid)
      }
      next
    }
    { if (sql != "") sql = sql " " $0 }
    END {
      emit()
      printf "all=%.1f", total / dt
      for (k in n) printf " %s=%.1f", k, n[k] / dt
      for (s in shape) printf "%8.2f  %s\n", shape[s] / dt, s > shapes
      for (s in bp) printf "%8.2f  %s\n", bp[s] / dt, s > byproc
    }' "$out/$tag.$1.t0" "$out/$tag.$1.t1" "$f"
  sort -rn -o "$out/$tag.$1.shapes" "$out/$tag.$1.shapes"
  sort -k2,2 -k1,1rn -o "$out/$tag.$1.byproc" "$out/$tag.$1.byproc"
}

printf '%s\n' "sim --rpm 6000000 --tpm 6000000000, instant; rate $rate jobs/s; ledger period $ledger; idle ${idle}s, loaded ${load}s"
for n in $sizes; do
  tag=fleet$n
  db=llmq_fleetpg_$$_$n
  queue=$db
  port=$((18300 + n))
  simport=$((18400 + n))
  url="postgres://postgres@127.0.0.1:5432/$db?sslmode=disable"
  export LLMQ_BROKER="amqp://guest:guest@127.0.0.1:5672/?queue=$queue"
  printf 'models:\n  gpt-4o-mini: {rpm: 6000000, tpm: 6000000000}\nbackpressure: {soft_depth: 5000000, hard_depth: 10000000}\n' >"$out/llmq.yaml"
  export LLMQ_CONFIG=$out/llmq.yaml LLMQ_API_KEYS="fleet-key:fleet" OPENAI_API_KEY=sk-fleet
  LLMQ_DATABASE_URL=$url "$bin" migrate >/dev/null
  if [ -r "$pglog" ]; then psql_ -c "ALTER DATABASE $db SET log_statement = 'all'"; fi
  pids=()
  "$bin" sim --listen "127.0.0.1:$simport" --rpm 6000000 --tpm 6000000000 >"$out/$tag.sim.log" 2>&1 &
  pids+=($!)
  LLMQ_DATABASE_URL="$url&application_name=api" "$bin" api --listen "127.0.0.1:$port" --metrics-listen "" >"$out/$tag.api.log" 2>&1 &
  pids+=($!)
  for i in $(seq 1 "$n"); do
    LLMQ_DATABASE_URL="$url&application_name=worker-$i" "$bin" worker --replica "w$i" --metrics-listen "" \
      --openai-base-url "http://127.0.0.1:$simport/v1" --ledger-period "$ledger" >"$out/$tag.worker$i.log" 2>&1 &
    pids+=($!)
  done
  sleep 5 # past the start: migrations, first ledger rounds, LISTEN
  window idle "$idle"
  # A steady rate: RATE/5 jobs every 200 ms, published in batches of them.
  per=$(((rate + 4) / 5))
  (
    i=0
    while :; do
      for _ in $(seq 1 "$per"); do
        i=$((i + 1))
        printf '{"body":{"model":"gpt-4o-mini","max_tokens":16,"messages":[{"role":"user","content":"Say ok %d."}]}}\n' "$i"
      done
      sleep 0.2
    done
  ) | LLMQ_DATABASE_URL="$url&application_name=produce" "$bin" produce --batch "$per" --in-flight 1 >"$out/$tag.produce.log" 2>&1 &
  prod=$!
  pids+=($prod)
  sleep 5 # the queue's first jobs through
  window load "$load"
  succeeded=$(psql_ -d "$db" -c "SELECT count(*) FROM jobs WHERE status = 'succeeded'")
  queued=$(psql_ -d "$db" -c "SELECT count(*) FROM jobs WHERE status NOT IN ('succeeded')")
  cleanup
  pids=()
  for w in idle load; do
    read -r dt x <"$out/$tag.$w.xact"
    printf 'workers %d %-4s xact/s %.1f | cpu %s| statements/s %s\n' "$n" "$w" "$(echo "$x / $dt" | bc -l)" "$(cpu $w)" "$(statements $w)"
  done
  printf 'workers %d jobs succeeded %s, not yet %s\n' "$n" "$succeeded" "$queued"
  psql_ -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null
  rabbitmqctl delete_queue "$queue" >/dev/null 2>&1 || true
done
echo "raw files: $out"
