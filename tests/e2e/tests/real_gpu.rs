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
