#!/usr/bin/env bash
# The CSV benchmark (docs/performance.md, "CSV source"): `tessera analyze` on a 5.2 M-row generic
# long CSV (256 pods x 7 days at 60 s, scripts/gen-csv-bench.py) against its peer, DuckDB through
# its Python package applying the same idle-loaded rule to the same file
# (scripts/bench-csv-duckdb.py), alternating, RUNS times each, in one run on one machine.
#
#   bash scripts/bench-csv.sh [RUNS]        (needs: pip install duckdb; a release build)
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-3}"
data="${BENCH_DIR:-target/bench-data}"
mkdir -p "$data"
csv="$data/pods-7d-60s.csv"
[ -f "$csv" ] || python3 scripts/gen-csv-bench.py "$csv"
tessera="${TESSERA:-target/release/tessera}"
[ -x "$tessera" ] || cargo build --release -p tessera
python3 -c 'import duckdb' 2>/dev/null || { echo "pip install duckdb first" >&2; exit 1; }
echo "file: $csv ($(du -m "$csv" | cut -f1) MB, $(($(wc -l < "$csv") - 1)) rows); $(nproc) cores"
for i in $(seq 1 "$runs"); do
  /usr/bin/time -f "tessera analyze: %e s wall, %M KiB max RSS" \
    "$tessera" analyze --source "csv:$csv" --format json > "$data/analysis.json" 2> "$data/analyze.err" \
    || { cat "$data/analyze.err" >&2; exit 1; }
  tail -1 "$data/analyze.err"
  found=$(python3 -c "import json,sys; a=json.load(open('$data/analysis.json')); print(sum(1 for f in a['findings'] if f['detector']=='idle_loaded'))")
  echo "  tessera: $found idle-loaded entities"
  /usr/bin/time -f "duckdb: %e s wall, %M KiB max RSS" python3 scripts/bench-csv-duckdb.py "$csv"
done
