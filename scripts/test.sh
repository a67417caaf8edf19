#!/usr/bin/env bash
# Runs every test of the project: unit and integration tests with the race
# detector (real etcd, QUIC, Badger and files — nothing to start by hand),
# then each fuzz target briefly. Called by `make test` and .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
FUZZTIME=${FUZZTIME:-10s}

echo "== deps"
# Tools the tests run (promtool); a test that needs one fails under CI
# without it.
./scripts/deps.sh

echo "== go vet"
$GO vet ./...

echo "== go test -race"
# -p 2: this machine (and CI) has 2 cores; the integration tests start etcd
# and QUIC servers and are timing-sensitive only through generous timeouts.
$GO test -race -p 2 -timeout 20m -count=1 ./...

echo "== fuzz (each target for $FUZZTIME)"
# Every Fuzz* function in the tree, found rather than listed, so a new target
# cannot be forgotten.
grep -rl --include='*_test.go' '^func Fuzz' . | while read -r f; do
	dir=$(dirname "$f")
	for fn in $(grep -o '^func Fuzz[A-Za-z0-9_]*' "$f" | sed 's/^func //'); do
		echo "-- $dir $fn"
		out=$(mktemp)
		if ! $GO test -run='^$' -fuzz="^${fn}\$" -fuzztime="$FUZZTIME" "$dir" 2>&1 | tee "$out"; then
			# Go's fuzzer sometimes ends at -fuzztime with its own
			# "context deadline exceeded" and no failing input: run
			# it once more then. A real failure writes its input
			# under testdata/fuzz and fails again.
			if grep -q 'context deadline exceeded' "$out" && ! grep -q 'Failing input written' "$out"; then
				echo "-- $dir $fn: the fuzzer's own deadline at the end of -fuzztime, no failing input: once more"
				$GO test -run='^$' -fuzz="^${fn}\$" -fuzztime="$FUZZTIME" "$dir"
			else
				rm -f "$out"
				exit 1
			fi
		fi
		rm -f "$out"
	done
done
echo "== all tests passed"
