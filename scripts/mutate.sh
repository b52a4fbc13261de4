#!/usr/bin/env bash
# mutate.sh: mutation testing (gremlins) of the pure packages, one package at
# a time: shaping, the root job contract and the worker's decision policy.
# docs/mutation.md says what the figures mean and lists the equivalent
# mutants.
#
#   scripts/mutate.sh [shaping|contract|policy ...]   (default: all three)
#
# Each run writes bin/mutate/<name>.json (gremlins' machine-readable
# results) and fails when a package's efficacy (killed / (killed + lived))
# is under MUTATE_EFFICACY percent (default 85). Slow on purpose: each
# mutant is one `go test` of its package, so it is not part of `make test`.
# MUTATE_WORKERS (default 1) sets the parallel test runs. A mutant's test
# run is given a multiple of the coverage run's time (MUTATE_TIMEOUT, else
# the package's own below): room to compile each mutant on a loaded
# machine, or sound mutants are reported TIMED OUT, but not hours for a
# mutant that loops (the contract's coverage run builds every package's
# tests, so its factor is small).
set -euo pipefail
cd "$(dirname "$0")/.."

gremlins_version=v0.6.0
workers=${MUTATE_WORKERS:-1}
efficacy=${MUTATE_EFFICACY:-85}
out=bin/mutate
mkdir -p "$out"

declare -A dir=([shaping]=shaping [contract]=. [policy]=worker)
declare -A timeout=([shaping]=60 [contract]=3 [policy]=10)
# The tests of each package that exercise its pure code; the others (the
# worker's Postgres and broker tests, the root package's build of other
# modules) are left out: they would not kill a mutant the pure tests let
# live, and they would make every mutant cost minutes.
declare -A tests=(
  [contract]='^(Test(ModelCost|Catalog|Encode|CheckSize|CanTransition|TerminalStates|LeasedStatuses|Decode|ValidateGoJob|ValidationError|ValidID|Priority|NotAnObject)|FuzzDecode)'
  [policy]='^Test(Decide|NextFallback|Backoff|RetryBudget|NewRetryBudget|Classify|ParseProvider)'
)
# Files left unmutated (a regexp on the path in the package; gremlins never
# mutates test files): the contract is the root's files, not the packages
# below it; the policy is policy.go, backoff.go and classify.go of worker/.
declare -A exclude=(
  [contract]='/'
  [policy]='^(config|doc|ingest|lanes|lease|metrics|observe|run|schedule|scheduler|upstream|worker)\.go$'
)
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(shaping contract policy)
for name in "${names[@]}"; do
  [ -n "${dir[$name]:-}" ] || { echo "mutate: unknown package $name (shaping, contract, policy)" >&2; exit 2; }
  echo "== $name (${dir[$name]})"
  args=(--workers "$workers" --timeout-coefficient "${MUTATE_TIMEOUT:-${timeout[$name]}}" --threshold-efficacy "$efficacy" --output "$out/$name.json")
  [ -z "${exclude[$name]:-}" ] || args+=(--exclude-files "${exclude[$name]}")
  # gremlins passes its environment to every `go test`: -run in GOFLAGS
  # limits the coverage run and the mutants' runs to the pure tests, and
  # -vet=off spares each mutant a vet of its package (make lint vets).
  flags="${GOFLAGS:-} -vet=off"
  [ -z "${tests[$name]:-}" ] || flags="$flags -run=${tests[$name]}"
  GOFLAGS=$flags go run "github.com/go-gremlins/gremlins/cmd/gremlins@$gremlins_version" \
    unleash "${args[@]}" "${dir[$name]}"
done
