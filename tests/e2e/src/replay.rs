//! Replaying a GPU check kit recording (`scripts/gpu-check.sh`; `fixtures/real/<gpu-model>/`)
//! through the recorded fake library (`tests/fake-nvml-recorded`) and comparing the exporter's
//! output there with what it printed on the GPU:
//!
//! - [`once_differences`]: `--once --format json` on `nvml-once.jsonl` against
//!   `exporter-once.json`, equal but for the sample's timestamp and the node name (the host's);
//! - [`metrics_differences`]: `/metrics` served on `nvml-serve.jsonl` cut to the sample each
//!   scrape served (`scrapes.txt`) against that scrape, for the series NVML's values make
//!   (`tessera_gpu_*`, `tessera_mig_*`, `tessera_process_*`): the same series with the same
//!   values, except the ones that count time since something (`*_idle_seconds`) and the
//!   attribution labels read from the host's /proc (`pod_uid`, `container_id`, `slurm_job_id`).
//!
//! It starts processes and reads files; it holds no product code.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use crate::monitoring::Exporter;
use crate::{fake_nvml_recorded, run};

/// The exporter's `--once --format json` on the recording in `dir`, as JSON.
pub fn once_on_recording(dir: &Path) -> serde_json::Value {
    let mut cmd: Command = crate::exporter!["--once", "--format", "json", "--nvml.lib-path"];
    cmd.arg(fake_nvml_recorded())
        .env("TESSERA_FAKE_NVML_RECORDING", dir.join("nvml-once.jsonl"))
        .env_remove("TESSERA_NVML_TRACE");
    let (o, out, err) = run(cmd);
    assert!(
        o.status.success(),
        "exporter --once on the recording: {err}"
    );
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("--once output: {e}\n{out}"))
}

fn normalise_once(mut v: serde_json::Value) -> serde_json::Value {
    if let Some(s) = v.get_mut("sample").and_then(|s| s.as_object_mut()) {
        s.remove("timestamp_ms");
    }
    if let Some(i) = v.get_mut("inventory").and_then(|s| s.as_object_mut()) {
        i.remove("node");
    }
    v
}

/// Where `--once` on the recording differs from what the exporter printed on the GPU (JSON
/// pointers with both values); empty when they agree.
pub fn once_differences(dir: &Path) -> Vec<String> {
    let golden: serde_json::Value = serde_json::from_slice(
        &std::fs::read(dir.join("exporter-once.json")).expect("exporter-once.json"),
    )
    .expect("exporter-once.json is JSON");
    let mut out = Vec::new();
    diff(
        "",
        &normalise_once(golden),
        &normalise_once(once_on_recording(dir)),
        &mut out,
    );
    out
}

fn diff(at: &str, a: &serde_json::Value, b: &serde_json::Value, out: &mut Vec<String>) {
    use serde_json::Value::{Array, Object};
    match (a, b) {
        (Object(x), Object(y)) => {
            for k in x.keys().chain(y.keys().filter(|k| !x.contains_key(*k))) {
                let null = serde_json::Value::Null;
                diff(
                    &format!("{at}/{k}"),
                    x.get(k).unwrap_or(&null),
                    y.get(k).unwrap_or(&null),
                    out,
                );
            }
        }
        (Array(x), Array(y)) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                diff(&format!("{at}/{i}"), p, q, out);
            }
        }
        _ if a != b => out.push(format!("{at}: on the GPU {a}, on the recording {b}")),
        _ => {}
    }
}

/// The series of an exposition made from NVML's values: `name{labels}` → value.
pub fn nvml_series(exposition: &str) -> BTreeMap<String, f64> {
    const HOST_LABELS: [&str; 3] = ["pod_uid", "container_id", "slurm_job_id"];
    let mut out = BTreeMap::new();
    for line in exposition.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let ours = ["tessera_gpu_", "tessera_mig_", "tessera_process_"]
            .iter()
            .any(|p| line.starts_with(p));
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let name = series.split('{').next().unwrap_or(series);
        if !ours || name.ends_with("_idle_seconds") {
            continue;
        }
        let labels = series
            .split_once('{')
            .map(|(_, l)| l.trim_end_matches('}'))
            .unwrap_or("");
        let kept: Vec<&str> = split_labels(labels)
            .into_iter()
            .filter(|l| !HOST_LABELS.iter().any(|h| l.starts_with(&format!("{h}="))))
            .collect();
        let v: f64 = value.parse().unwrap_or(f64::NAN);
        out.insert(format!("{name}{{{}}}", kept.join(",")), v);
    }
    out
}

/// Split `a="x",b="y,z"` at the commas between labels.
fn split_labels(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, c) in s.char_indices() {
        match c {
            '\\' if quoted => escaped = !escaped,
            '"' if !escaped => quoted = !quoted,
            ',' if !quoted => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => escaped = false,
        }
        if c != '\\' {
            escaped = false;
        }
    }
    if start < s.len() {
        out.push(&s[start..]);
    }
    out
}

fn series_differences(golden: &BTreeMap<String, f64>, got: &BTreeMap<String, f64>) -> Vec<String> {
    let mut out = Vec::new();
    for (k, v) in golden {
        match got.get(k) {
            None => out.push(format!("{k}: {v} on the GPU, absent on the recording")),
            Some(w) if (v - w).abs() > 1e-9 * v.abs().max(1.0) => {
                out.push(format!("{k}: {v} on the GPU, {w} on the recording"))
            }
            _ => {}
        }
    }
    for (k, w) in got {
        if !golden.contains_key(k) {
            out.push(format!("{k}: absent on the GPU, {w} on the recording"));
        }
    }
    out
}

/// The scrapes of `dir` with the recorded sample each served (`scrapes.txt`).
pub fn scrapes(dir: &Path) -> Vec<(String, usize)> {
    let text = std::fs::read_to_string(dir.join("scrapes.txt")).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let (file, k) = l.split_once(" samples=")?;
            Some((file.to_string(), k.trim().parse().ok()?))
        })
        .collect()
}

/// Where `/metrics` served on the recording cut at `samples` differs from the scrape `file` of
/// `dir`; empty when they agree. The exporter is scraped until the recording's last sample is
/// what it serves (the replay stays there), at most `attempts` scrapes 100 ms apart. It reads
/// the energy counter and process utilisation every 500 ms (5 samples), so the served counter
/// reaches the last recorded one within a few scrapes.
pub fn metrics_differences(dir: &Path, file: &str, samples: usize, attempts: u32) -> Vec<String> {
    let golden = nvml_series(
        &std::fs::read_to_string(dir.join(file)).unwrap_or_else(|e| panic!("{file}: {e}")),
    );
    assert!(!golden.is_empty(), "{file} holds no GPU series");
    let procfs = tempfile::tempdir().expect("temp dir");
    let mut cmd: Command = crate::exporter![
        "--sample.interval",
        "100ms",
        "--energy.interval",
        "500ms",
        "--nvml.lib-path"
    ];
    cmd.arg(fake_nvml_recorded())
        .arg("--path.procfs")
        .arg(procfs.path())
        .env("TESSERA_FAKE_NVML_RECORDING", dir.join("nvml-serve.jsonl"))
        .env("TESSERA_FAKE_NVML_RECORDING_SAMPLES", samples.to_string())
        .env_remove("TESSERA_NVML_TRACE");
    let exporter = Exporter::start(cmd);
    let mut last = Vec::new();
    for _ in 0..attempts {
        last = series_differences(&golden, &nvml_series(&exporter.scrape()));
        if last.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    last
}
