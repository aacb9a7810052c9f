#!/usr/bin/env bash
# `tessera report` and `tessera analyze` at fleet scale, one binary after the other on the same
# history, twice, with wall time and peak memory (GNU time), the report's time per section
# (`TESSERA_TIMINGS`: every `timings:` line it prints), and DuckDB computing the report's fleet
# tallies from the same Parquet files in the same range with the same number of threads
# (`scripts/report-duckdb.py`: GPU-hours and energy per node, GPU model and team, the free GPUs
# per hour), whose figures are checked against the report's: the figures of docs/performance.md
# ("The weekly report at 1,024 GPUs").
#
#   bash scripts/bench-report.sh HISTORY_DIR BIN [BIN...]
#
# Make the history with `python3 scripts/gen-fleet.py --gpus 1024 -o fleet.toml` and
# `tessera simulate --scenario fleet.toml --days 7 --out HISTORY_DIR` (release build). Each run's
# JSON goes to HISTORY_DIR/../bench-out/<n>-<command>.json for `cmp` between binaries, its
# timings to <n>-report.timings. THREADS (default: the CPUs) is DuckDB's thread count; tessera
# uses every CPU.
set -euo pipefail
data=${1:?usage: bench-report.sh HISTORY_DIR BIN [BIN...]}
shift
root=$(cd "$(dirname "$0")/.." && pwd)
out="$(dirname "$data")/bench-out"
threads=${THREADS:-$(nproc)}
mkdir -p "$out"
for round in 1 2; do
  n=0
  for bin in "$@"; do
    n=$((n + 1))
    for cmd in report analyze; do
      TESSERA_TIMINGS=1 /usr/bin/time -o "$out/time" -f "%e s %U u %S s %M KB" "$bin" "$cmd" \
        --source "history:$data" --format json >"$out/$n-$cmd.json" 2>"$out/$n-$cmd.stderr"
      echo "round $round  $bin  $cmd  $(tail -1 "$out/time")"
      if [ "$cmd" = report ]; then
        grep '^timings: ' "$out/$n-$cmd.stderr" >"$out/$n-report.timings" || true
        sed 's/^/    /' "$out/$n-report.timings"
      fi
    done
  done
  # DuckDB over the report's own range (its `from` and `until`), then its figures beside the
  # report's (the first binary's).
  read -r since until < <(python3 -c '
import json, sys, datetime
r = json.load(open(sys.argv[1]))
ms = lambda s: int(datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp() * 1000)
print(ms(r["from"]), ms(r["until"]))' "$out/1-report.json")
  /usr/bin/time -o "$out/time" -f "%e s %U u %S s %M KB" python3 "$root/scripts/report-duckdb.py" \
    "$data" --since "$since" --until "$until" --threads "$threads" >"$out/duckdb.json"
  echo "round $round  duckdb ($threads threads)  tallies  $(tail -1 "$out/time")" \
    "(queries $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["seconds"])' "$out/duckdb.json") s)"
done
python3 - "$out/1-report.json" "$out/duckdb.json" <<'PY'
import json, sys
r, d = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
bad = []
near = lambda a, b: abs(a - b) <= 0.0006
if r["fleet"]["gpus"] != d["fleet"]["gpus"] or not near(r["fleet"]["gpu_hours_observed"], d["fleet"]["gpu_hours"]):
    bad.append("fleet GPU-hours")
if not near(r["fleet"]["energy_kwh"], d["fleet"]["energy_kwh"]):
    bad.append("fleet energy")
for k in ("by_node", "by_model"):
    for row in r[k]:
        o = d[k].get(row["key"])
        if o is None or not near(row["gpu_hours_observed"], o["gpu_hours"]) or not near(row["energy_kwh"], o["energy_kwh"]):
            bad.append(f"{k} {row['key']}")
for t in r["teams"]["rows"]:
    if not near(t["gpu_hours"], d["teams"].get(t["team"], -1)):
        bad.append(f"team {t['team']}")
print("fleet figures equal to DuckDB's:", "yes" if not bad else "no: " + ", ".join(bad[:10]))
PY
