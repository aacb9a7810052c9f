#!/usr/bin/env bash
# Writes every analyzer command's output (table, JSON, Markdown, HTML, mig-parted YAML) on the
# demo history and on the fleet-64 scenario into OUT, so that a refactor can be checked
# byte-identical: run it before and after, then `diff -r BEFORE AFTER`.
#
#   bash scripts/outputs-snapshot.sh OUT [TESSERA_BIN]
#
# TESSERA_BIN defaults to target/debug/tessera (built here). Runs with NO_COLOR and a fixed
# --until so that no output depends on the clock.
set -euo pipefail
out=${1:?usage: outputs-snapshot.sh OUT [TESSERA_BIN]}
bin=${2:-}
root=$(cd "$(dirname "$0")/.." && pwd)
if [ -z "$bin" ]; then
  cargo build -q -p tessera -p tessera-exporter --manifest-path "$root/Cargo.toml"
  bin="$root/target/debug/tessera"
fi
export NO_COLOR=1
mkdir -p "$out"
fleet="$out/.fleet-64"
if [ ! -d "$fleet" ]; then
  "$bin" simulate --scenario "$root/fixtures/scenarios/fleet-64.toml" --days 3 \
    --sample-interval 1m --history.interval 1m --out "$fleet" >/dev/null 2>&1
fi
for name in demo fleet; do
  case $name in
    demo) src="history:$root/fixtures/demo-history" ;;
    fleet) src="history:$fleet" ;;
  esac
  run() { # run FILE ARGS...: stdout to FILE, stderr beside it, exit code kept
    local f=$1; shift
    set +e
    "$bin" "$@" >"$out/$name.$f" 2>"$out/$name.$f.stderr"
    echo "exit $?" >>"$out/$name.$f.stderr"
    set -e
  }
  run analyze.txt analyze --source "$src"
  run analyze.json analyze --source "$src" --format json
  for fmt in table markdown html json; do
    run "report.$fmt" report --source "$src" --format "$fmt"
    run "report-berlin.$fmt" report --source "$src" --format "$fmt" --tz Europe/Berlin
  done
  run report-by-job.txt report --source "$src" --by job
  run report-by-job.json report --source "$src" --by job --format json
  run ingest.txt ingest --source "$src"
  run mig-plan.txt mig plan --source "$src" -o "$out/$name.mig-plan.out.yaml"
  run mig-plan.json mig plan --source "$src" --format json -o "$out/$name.mig-plan-json.out.yaml"
  run mig-plan-schedule.txt mig plan --source "$src" -o "$out/$name.mig-plan-schedule.out.yaml" \
    --schedule "$out/$name.schedule.yaml" --mig-parted-config "$out/$name.mig-parted.yaml"
  run mig-profiles.txt mig profiles --backend sim
  run mig-export.yaml mig export --backend sim
done
exporter=${TESSERA_EXPORTER_BIN:-$(dirname "$bin")/tessera-exporter}
if [ -x "$exporter" ]; then
  for node in gpu-node-1 gpu-node-3; do
    "$exporter" --backend sim --once --sim.node "$node" --sim.time 2026-11-03T14:00:00Z >"$out/exporter.$node.txt" 2>&1 || true
    "$exporter" --backend sim --once --format json --sim.node "$node" --sim.time 2026-11-03T14:00:00Z >"$out/exporter.$node.json" 2>&1 || true
  done
fi
