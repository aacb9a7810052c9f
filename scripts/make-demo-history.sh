#!/usr/bin/env bash
# Regenerates fixtures/demo-history/, the small simulated fleet history that the README's
# "Try it" command reports on (docs/report.md): four days (Monday to Thursday) of
# fixtures/scenarios/report-demo.toml, sampled every 10 s and written as 5-minute history rows
# (about 0.5 MB: finished days are compacted into day files). Deterministic: the same scenario and seed give the same rows.
set -euo pipefail
cd "$(dirname "$0")/.."
out=fixtures/demo-history
rm -rf "$out"
cargo run -q -p tessera -- simulate \
  --scenario fixtures/scenarios/report-demo.toml \
  --days 4 \
  --sample-interval 10s \
  --history.interval 5m \
  --out "$out"
du -sh --apparent-size "$out"
