//! A generated benchmark fleet simulated into history for tests: `scripts/gen-fleet.py` (N GPUs,
//! 8 per node, four GPU models, MIG instances, every workload kind) and `tessera simulate` at
//! 60-s samples and rows. It does not read the history (the tests do, each its own way).

#![allow(dead_code)] // each test binary uses part of the support modules

use std::path::{Path, PathBuf};
use std::process::Command;

/// Generates a fleet of `gpus` GPUs (seed `seed`) in `dir` and simulates `days` of it; the
/// history folder and the scenario's start, unix ms.
pub fn simulate(dir: &Path, gpus: u32, seed: u32, days: u32) -> (PathBuf, i64) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let fleet = dir.join("fleet.toml");
    let made = Command::new("python3")
        .arg(root.join("scripts/gen-fleet.py"))
        .args([
            "--gpus",
            &gpus.to_string(),
            "--seed",
            &seed.to_string(),
            "-o",
        ])
        .arg(&fleet)
        .output()
        .expect("python3");
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let hist = dir.join("history");
    let out = super::cli::tessera(&[
        "simulate",
        "--scenario",
        fleet.to_str().unwrap(),
        "--days",
        &days.to_string(),
        "--sample-interval",
        "60s",
        "--history.interval",
        "60s",
        "--out",
        hist.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let start = tessera_core::sim::Scenario::from_file(&fleet)
        .expect("scenario")
        .start
        .timestamp_millis();
    (hist, start)
}
