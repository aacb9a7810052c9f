//! Simulated history whose GPU processes carry `slurm_job_id`, shared by `job.rs` and
//! `slurm_real.rs`: one node with three H100s; job 500 trains on GPU 0 (busy, 20 h), job 501
//! holds 12 GiB on GPU 1 and does nothing (idle), job 502 serves lightly on a MIG instance of
//! GPU 2. One day from 2026-11-02T00:00Z, 1-minute history rows.

use std::path::{Path, PathBuf};

use crate::support::cli::tessera;

const SCENARIO: &str = r#"
name = "slurm-jobs"
seed = 7
start = "2026-11-02T00:00:00Z"
utc_offset_hours = 0

[[nodes]]
name = "hpc-1"
gpus = [{ model = "H100-80GB", count = 3 }]
mig = [{ gpu = 2, instances = [{ profile = "3g.40gb", start = 0 }] }]

[[workloads]]
name = "train"
kind = "training"
node = "hpc-1"
gpu = 0
memory_gib = 70.0
peak = 0.9
start_hour = 0.0
duration_hours = 20.0
process = "torchrun"
slurm_job = "500"

[[workloads]]
name = "notebook"
kind = "idle"
node = "hpc-1"
gpu = 1
memory_gib = 12.0
process = "python"
slurm_job = "501"

[[workloads]]
name = "small-infer"
kind = "inference"
node = "hpc-1"
gpu = 2
mig_start = 0
memory_gib = 6.0
peak = 0.3
process = "server"
slurm_job = "502"
"#;

/// Simulates the scenario into `dir/h` (writing `dir/slurm.toml`) and returns that folder.
pub fn history(dir: &Path) -> PathBuf {
    let scenario = dir.join("slurm.toml");
    std::fs::write(&scenario, SCENARIO).unwrap();
    let h = dir.join("h");
    let out = tessera(&[
        "simulate",
        "--scenario",
        scenario.to_str().unwrap(),
        "--days",
        "1",
        "--sample-interval",
        "10s",
        "--history.interval",
        "1m",
        "--out",
        h.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "simulate: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    h
}
