//! Recordings of real GPUs (`fixtures/real/<gpu-model>/`, made by the GPU check kit on the GPU,
//! docs/testing.md "On a real GPU") replayed through the recorded fake library: on each, the
//! exporter must print what it printed on that GPU (`--once --format json`) and serve the same
//! GPU series on `/metrics` as each scrape the kit took there (`tessera_e2e::replay`).

use std::path::PathBuf;

use tessera_e2e::replay::{metrics_differences, once_differences, scrapes};
use tessera_e2e::{repo_root, run, tessera};

fn recordings() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(repo_root().join("fixtures/real"))
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.join("nvml-once.jsonl").exists())
                .collect()
        })
        .unwrap_or_default();
    dirs.sort();
    dirs
}

#[test]
fn the_exporter_prints_on_each_real_recording_what_it_printed_on_that_gpu() {
    let dirs = recordings();
    assert!(!dirs.is_empty(), "fixtures/real/ holds no recording");
    for dir in dirs {
        let d = once_differences(&dir);
        assert!(d.is_empty(), "{}:\n{}", dir.display(), d.join("\n"));
    }
}

#[test]
fn the_exporter_serves_on_each_real_recording_the_series_each_scrape_got_on_that_gpu() {
    for dir in recordings() {
        let scraped = scrapes(&dir);
        assert!(
            !scraped.is_empty(),
            "{}: no scrape to compare",
            dir.display()
        );
        for (file, samples) in scraped {
            let d = metrics_differences(&dir, &file, samples, 100);
            assert!(d.is_empty(), "{} {file}:\n{}", dir.display(), d.join("\n"));
        }
    }
}

#[test]
fn a_recording_whose_power_reading_was_changed_no_longer_replays_to_the_golden_output() {
    // The comparison can fail: the first real recording with one value altered.
    let src = recordings().into_iter().next().expect("a real recording");
    let tmp = tempfile::tempdir().unwrap();
    for f in ["exporter-once.json", "nvml-once.jsonl"] {
        std::fs::copy(src.join(f), tmp.path().join(f)).unwrap();
    }
    let path = tmp.path().join("nvml-once.jsonl");
    let text = std::fs::read_to_string(&path).unwrap();
    let altered: Vec<String> = text
        .lines()
        .map(|l| {
            let mut c: serde_json::Value = serde_json::from_str(l).unwrap();
            if c["function"] == "nvmlDeviceGetPowerUsage" {
                c["value"] = serde_json::json!(c["value"].as_u64().unwrap() + 1000);
            }
            c.to_string()
        })
        .collect();
    std::fs::write(&path, altered.join("\n")).unwrap();
    let d = once_differences(tmp.path());
    assert_eq!(d.len(), 1, "{d:?}");
    assert!(d[0].starts_with("/sample/gpus/0/power_watts:"), "{d:?}");
}

/// The recordings whose archive holds the history the exporter wrote on the GPU.
fn histories() -> Vec<PathBuf> {
    recordings()
        .into_iter()
        .map(|d| d.join("history"))
        .filter(|h| h.is_dir())
        .collect()
}

#[test]
fn the_history_a_real_gpu_wrote_reads_back_to_its_own_energy_activity_and_memory() {
    // The answer comes from the recorded rows themselves (plain JSON lines), not from tessera.
    let dirs = histories();
    assert!(
        !dirs.is_empty(),
        "no real recording holds a history/ folder"
    );
    for dir in dirs {
        let mut rows: Vec<serde_json::Value> = Vec::new();
        for node in std::fs::read_dir(&dir).unwrap() {
            let gpu = node.unwrap().path().join("gpu");
            for f in std::fs::read_dir(&gpu).into_iter().flatten() {
                let text = std::fs::read_to_string(f.unwrap().path()).unwrap();
                rows.extend(
                    text.lines()
                        .skip(1) // the header line
                        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()),
                );
            }
        }
        assert!(
            rows.len() >= 4,
            "{}: {} GPU rows",
            dir.display(),
            rows.len()
        );
        let joules: f64 = rows
            .iter()
            .map(|r| r["energy_delta_joules"].as_f64().unwrap())
            .sum();
        let activity: f64 = rows
            .iter()
            .map(|r| r["sm_active_mean"].as_f64().unwrap())
            .sum::<f64>()
            / rows.len() as f64;
        let peak = rows
            .iter()
            .map(|r| r["memory_used_max_bytes"].as_u64().unwrap())
            .max()
            .unwrap();
        let hours: f64 = rows
            .iter()
            .map(|r| r["interval_ms"].as_f64().unwrap())
            .sum::<f64>()
            / 3.6e6;

        let (out, stdout, stderr) = run(tessera!(
            "report",
            "--source",
            format!("history:{}", dir.display()),
            "--format",
            "json"
        ));
        assert_eq!(out.status.code(), Some(0), "{}: {stderr}", dir.display());
        let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        let fleet = &report["fleet"];
        let near = |key: &str, want: f64, places: i32| {
            let got = fleet[key]
                .as_f64()
                .unwrap_or_else(|| panic!("{key}: {fleet}"));
            let unit = 10f64.powi(-places);
            assert!(
                (got - want).abs() <= unit / 2.0 + 1e-12,
                "{}: {key} {got} vs {want}",
                dir.display()
            );
        };
        assert_eq!(fleet["gpus"], 1, "{fleet}");
        assert_eq!(report["activity_signal"], "sm_active", "{report}");
        near("energy_kwh", joules / 3.6e6, 3);
        near("activity_mean", activity, 2);
        near("memory_peak_gib", peak as f64 / (1u64 << 30) as f64, 3);
        near("gpu_hours_observed", hours, 3);
        // The matmul ran in every full interval after the first: busy, never idle-loaded.
        let (out, stdout, stderr) = run(tessera!(
            "analyze",
            "--source",
            format!("history:{}", dir.display()),
            "--format",
            "json"
        ));
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        let analyze: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(
            analyze["findings"].as_array().map(Vec::len),
            Some(0),
            "{analyze}"
        );
    }
}
