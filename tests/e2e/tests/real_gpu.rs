//! Recordings of real GPUs (`fixtures/real/<gpu-model>/`, made by the GPU check kit on the GPU,
//! docs/testing.md "On a real GPU") replayed through the recorded fake library: on each, the
//! exporter must print what it printed on that GPU (`--once --format json`) and serve the same
//! GPU series on `/metrics` as each scrape the kit took there (`tessera_e2e::replay`).

use std::path::PathBuf;

use tessera_e2e::replay::{metrics_differences, once_differences, scrapes};
use tessera_e2e::repo_root;

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
