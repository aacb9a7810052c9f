#!/usr/bin/env bash
# `tessera report` and `tessera analyze` at fleet scale, one binary after the other on the same
# history, twice, with wall time and peak memory (GNU time): the figures of docs/performance.md
# ("The weekly report at 1,024 GPUs").
#
#   bash scripts/bench-report.sh HISTORY_DIR BIN [BIN...]
#
# Make the history with `python3 scripts/gen-fleet.py --gpus 1024 -o fleet.toml` and
# `tessera simulate --scenario fleet.toml --days 7 --out HISTORY_DIR` (release build). Each run's
# JSON goes to HISTORY_DIR/../bench-out/<n>-<command>.json for `cmp` between binaries.
set -euo pipefail
data=${1:?usage: bench-report.sh HISTORY_DIR BIN [BIN...]}
shift
out="$(dirname "$data")/bench-out"
mkdir -p "$out"
for round in 1 2; do
  n=0
  for bin in "$@"; do
    n=$((n + 1))
    for cmd in report analyze; do
      /usr/bin/time -o "$out/time" -f "%e s %U u %S s %M KB" "$bin" "$cmd" --source "history:$data" \
        --format json >"$out/$n-$cmd.json" 2>/dev/null
      echo "round $round  $bin  $cmd  $(tail -1 "$out/time")"
    done
  done
done
