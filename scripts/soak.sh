#!/usr/bin/env bash
# Crash-safety soak of the history writer (docs/performance.md, "History crash-safety soak").
#
#   scripts/soak.sh [MINUTES] [SPEED]      default: 30 minutes at 100 virtual seconds per second
#
# Runs release builds of tessera-exporter on the simulator (--backend sim --sim.speed SPEED, one
# sample per virtual second, --history.dir) for MINUTES, kills it with SIGKILL at random moments
# (half of the kills aimed at an hourly rotation) and restarts it, then reads every history row
# back (the exporter's reader, and `tessera ingest --format json`) and prints the figures:
# restarts, intervals expected, found, lost (in progress at a kill, and beyond), duplicated rows.
# It fails when an interval is lost beyond the one in progress at a kill, or a row is duplicated.
#
# The kill/restart loop and the checks are the e2e test tests/e2e/tests/soak.rs (CI runs it for
# about 20 s with debug builds); this script gives it the release binaries and the duration.
#
# Environment:
#   RELEASE_TARGET_DIR  cargo target folder of the release build (default: target)
#   SOAK_DIR            where the history, the exporter's log and soak-summary.json go
#                       (default: a new folder under /tmp, kept)
#   SOAK_SEED           random seed (default: from the clock; printed)
#   SOAK_MAX_RUN_MS     longest run between two random kills (default 10000)
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${1:-30}
speed=${2:-100}
release=${RELEASE_TARGET_DIR:-target}
dir=${SOAK_DIR:-$(mktemp -d /tmp/tessera-soak.XXXXXX)}

CARGO_TARGET_DIR="$release" cargo build --release -p tessera-exporter -p tessera
echo "soak: $minutes min at speed $speed; output in $dir"
SOAK_SECONDS=$((minutes * 60)) \
SOAK_SPEED="$speed" \
SOAK_MAX_RUN_MS="${SOAK_MAX_RUN_MS:-10000}" \
SOAK_EXPORTER="$(realpath "$release/release/tessera-exporter")" \
SOAK_TESSERA="$(realpath "$release/release/tessera")" \
SOAK_DIR="$dir" \
  cargo test -p tessera-e2e --test tests soak:: -- --nocapture

# The same folder through the analyzer's reader, as a user would look at it.
"$release/release/tessera" ingest --format json --source "history:$dir/history/gpu-node-1" \
  | jq '{files, torn_lines, warnings, tables: [.tables[] | {table, rows, entities, first, last}]}'
echo "figures: $dir/soak-summary.json"
