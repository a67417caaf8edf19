#!/usr/bin/env bash
# bench.sh quick|full [lehr-bench flags...] — run Lehr's benchmark harness.
#
# For the run only, it raises the UDP socket buffer ceilings
# (net.core.rmem_max / wmem_max, which quic-go wants at 7.5 MB) when they are
# lower and writable, and restores them on exit (trap); it raises the open
# file limit of this shell (Badger stores and QUIC sockets). It prints every
# change it makes. Results go to bench/results/<timestamp>.json; the table
# goes to stdout.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-quick}
shift || true
case "$mode" in
  quick|full|smoke) ;;
  *) echo "usage: $0 quick|full|smoke [lehr-bench flags]" >&2; exit 2 ;;
esac

want_buf=7500000
declare -A restore=()
restore_sysctls() {
  for k in "${!restore[@]}"; do
    if sysctl -q -w "$k=${restore[$k]}" >/dev/null 2>&1; then
      echo "bench.sh: restored $k=${restore[$k]}"
    else
      echo "bench.sh: could not restore $k=${restore[$k]}" >&2
    fi
  done
}
trap restore_sysctls EXIT

for k in net.core.rmem_max net.core.wmem_max; do
  cur=$(sysctl -n "$k" 2>/dev/null || echo "")
  if [[ -z "$cur" ]]; then
    echo "bench.sh: $k not readable; leaving it"
    continue
  fi
  if (( cur >= want_buf )); then
    echo "bench.sh: $k=$cur already >= $want_buf"
    continue
  fi
  if sysctl -q -w "$k=$want_buf" >/dev/null 2>&1; then
    restore[$k]=$cur
    echo "bench.sh: raised $k $cur -> $want_buf for this run"
  else
    echo "bench.sh: $k=$cur is not writable here; quic-go will warn about small UDP buffers"
  fi
done

soft=$(ulimit -n)
hard=$(ulimit -Hn)
target=1048576
[[ "$hard" != unlimited ]] && (( hard < target )) && target=$hard
if [[ "$soft" != unlimited ]] && (( soft < target )); then
  if ulimit -n "$target" 2>/dev/null; then
    echo "bench.sh: raised open files (ulimit -n) $soft -> $target for this run"
  else
    echo "bench.sh: could not raise open files from $soft"
  fi
else
  echo "bench.sh: open files (ulimit -n) $soft"
fi

mkdir -p bin
go build -o bin/lehr-bench ./cmd/lehr-bench
go build -o bin/lehr-agent ./cmd/lehr-agent
./bin/lehr-bench "-$mode" -agent-binary "$PWD/bin/lehr-agent" "$@"
