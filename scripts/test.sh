#!/usr/bin/env bash
# The project's test command (README.md): formatting, lints and every test of the workspace,
# including the NVML code path through the fake libnvidia-ml.so and the end-to-end tests of both
# binaries. Installs what it needs; needs no GPU and no server.
set -euo pipefail
cd "$(dirname "$0")/.."

need() { command -v "$1" >/dev/null 2>&1; }
if ! need cargo; then
  echo "cargo not found: install a Rust toolchain (rustup) first" >&2
  exit 1
fi
# rustfmt and clippy ship with rustup's default profile; add them when missing.
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
  rustup component add rustfmt clippy
fi

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy (warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo test"
cargo test --workspace --locked
