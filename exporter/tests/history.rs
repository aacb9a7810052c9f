//! History files end to end through the library: aggregate simulated samples, write them (JSONL
//! then Parquet), read them back strictly; corrupt files fail with the file, line and column;
//! an unwritable folder is counted while the sampler keeps publishing.

use std::collections::HashMap;
use std::fs;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tessera_exporter::device::GpuBackend;
use tessera_exporter::history::reader::{read_node_dir, read_table_batches};
use tessera_exporter::history::{
    self, Aggregator, HistoryError, HistoryStats, HistoryWriter, Rows, Table, WriterMode,
    WriterOptions,
};
use tessera_exporter::sampler::{Sampler, SamplerConfig, SamplerHooks};
use tessera_exporter::sim::{self, SimBackend, SimClock};

/// Write `seconds` of the demo's first node into `root`; returns the rows written.
fn simulate(root: &Path, seconds: i64, mode: WriterMode, finish: bool) -> Rows {
    let scenario = sim::load_scenario(None).unwrap();
    let start = scenario.start.timestamp_millis();
    let mut backend = SimBackend::new(
        &scenario,
        None,
        SimClock::Stepped {
            next_ms: start + 1000,
            step_ms: 1000,
        },
    )
    .unwrap();
    let inv = Arc::new(backend.inventory().unwrap());
    let attribution = backend.node().attribution();
    let opts = WriterOptions {
        mode,
        ..WriterOptions::default()
    };
    let mut w = HistoryWriter::open(root, &inv.node, opts, start).unwrap();
    let mut agg = Aggregator::new(&inv.node, 10_000);
    let mut all = Rows::default();
    let mut keep = |r: &Rows| {
        all.gpu.extend(r.gpu.iter().cloned());
        all.mig.extend(r.mig.iter().cloned());
        all.process.extend(r.process.iter().cloned());
    };
    for _ in 0..seconds {
        let s = backend.sample().unwrap();
        if let Some(rows) = agg.push(&inv, &s, &attribution) {
            w.write(&rows).unwrap();
            keep(&rows);
        }
    }
    if finish {
        let rows = agg.flush().unwrap();
        w.write(&rows).unwrap();
        keep(&rows);
        w.finish().unwrap();
    }
    all
}

#[test]
fn round_trip_open_segments_then_parquet() {
    let tmp = tempfile::tempdir().unwrap();
    let rows = simulate(tmp.path(), 3600 + 120, WriterMode::Jsonl, false);
    let node = tmp.path().join("gpu-node-1");
    // Hour 0 rotated into Parquet, hour 1 still open.
    assert!(node.join("gpu/2026-11-02T00.parquet").exists());
    assert!(node.join("gpu/2026-11-02T01.open.jsonl").exists());
    let h = read_node_dir(&node).unwrap();
    assert_eq!(h.skipped_lines, 0);
    assert_eq!(h.manifest.interval_ms, 10_000);
    assert_eq!(h.gpu, rows.gpu);
    assert_eq!(h.mig, rows.mig);
    assert_eq!(h.process, rows.process);
    // 4 GPUs × 371 closed intervals; namespace and pod from the scenario.
    assert_eq!(h.gpu.len(), 4 * 371);
    assert!(
        h.process
            .iter()
            .any(|p| p.namespace.as_deref() == Some("serving"))
    );
    let (batches, _) = read_table_batches(&node, Table::Gpu).unwrap();
    assert_eq!(
        batches.iter().map(|b| b.num_rows()).sum::<usize>(),
        h.gpu.len()
    );

    // Direct mode writes the same rows.
    let tmp2 = tempfile::tempdir().unwrap();
    let rows2 = simulate(tmp2.path(), 3600 + 120, WriterMode::Direct, true);
    let h2 = read_node_dir(&tmp2.path().join("gpu-node-1")).unwrap();
    assert_eq!(h2.gpu, rows2.gpu);
    assert_eq!(h2.gpu.len(), 4 * 372);
    assert_eq!(&h2.gpu[..h.gpu.len()], &h.gpu[..]);
}

#[test]
fn crash_recovery_converts_past_hours() {
    let tmp = tempfile::tempdir().unwrap();
    let rows = simulate(tmp.path(), 600, WriterMode::Jsonl, false);
    let node = tmp.path().join("gpu-node-1");
    let open = node.join("gpu/2026-11-02T00.open.jsonl");
    // A torn last line, as a kill -9 leaves it.
    fs::OpenOptions::new()
        .append(true)
        .open(&open)
        .unwrap()
        .write_all(b"{\"ts\":1")
        .unwrap();
    let h = read_node_dir(&node).unwrap();
    assert_eq!(h.skipped_lines, 1);
    assert_eq!(h.gpu, rows.gpu);
    // Reopen two hours later: the segment becomes Parquet.
    let later = rows.gpu[0].ts + 2 * 3_600_000;
    HistoryWriter::open(tmp.path(), "gpu-node-1", WriterOptions::default(), later).unwrap();
    assert!(!open.exists());
    assert!(node.join("gpu/2026-11-02T00.parquet").exists());
    let h = read_node_dir(&node).unwrap();
    assert_eq!((h.gpu, h.skipped_lines), (rows.gpu, 0));
}

#[test]
fn corrupt_files_are_errors_naming_file_line_and_column() {
    let tmp = tempfile::tempdir().unwrap();
    simulate(tmp.path(), 120, WriterMode::Jsonl, false);
    let node = tmp.path().join("gpu-node-1");
    let open = node.join("gpu/2026-11-02T00.open.jsonl");
    let good = fs::read_to_string(&open).unwrap();
    let lines: Vec<&str> = good.lines().collect();

    // A bad line in the middle.
    let mut bad = lines.clone();
    bad[3] = "{not json";
    fs::write(&open, bad.join("\n") + "\n").unwrap();
    let e = read_node_dir(&node).unwrap_err().to_string();
    assert!(
        e.contains("2026-11-02T00.open.jsonl") && e.contains("line 4"),
        "{e}"
    );

    // Unknown and missing columns.
    let mut bad = lines.clone();
    let extra = lines[2].replacen("{", "{\"bogus\":1,", 1);
    bad[2] = &extra;
    fs::write(&open, bad.join("\n") + "\n").unwrap();
    let e = read_node_dir(&node).unwrap_err().to_string();
    assert!(e.contains("\"bogus\"") && e.contains("line 3"), "{e}");
    let missing = lines[2].replacen("\"samples\":", "\"x_samples\":", 1);
    let mut bad = lines.clone();
    bad[2] = &missing;
    fs::write(&open, bad.join("\n") + "\n").unwrap();
    let e = read_node_dir(&node).unwrap_err().to_string();
    assert!(e.contains("x_samples") || e.contains("\"samples\""), "{e}");
    fs::write(&open, &good).unwrap();
    read_node_dir(&node).unwrap();

    // Wrong manifest version.
    let manifest = node.join("tessera-history.json");
    let m = fs::read_to_string(&manifest).unwrap();
    fs::write(&manifest, m.replace("\"version\": 1", "\"version\": 99")).unwrap();
    let e = read_node_dir(&node).unwrap_err();
    assert!(matches!(e, HistoryError::Version { found: 99, .. }), "{e}");
    assert!(e.to_string().contains("tessera-history.json"));
    fs::write(&manifest, m).unwrap();

    // Truncated Parquet.
    let tmp2 = tempfile::tempdir().unwrap();
    simulate(tmp2.path(), 600, WriterMode::Direct, true);
    let pq = tmp2.path().join("gpu-node-1/gpu/2026-11-02T00.parquet");
    let bytes = fs::read(&pq).unwrap();
    fs::write(&pq, &bytes[..bytes.len() / 2]).unwrap();
    let e = read_node_dir(&tmp2.path().join("gpu-node-1"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("2026-11-02T00.parquet"), "{e}");
}

#[test]
fn unwritable_folder_is_counted_and_sampling_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    // A file where the folder should be: cannot be created, even as root.
    let root = tmp.path().join("not-a-dir");
    fs::write(&root, b"").unwrap();
    let stats = Arc::new(HistoryStats::default());
    let (sender, _thread) = history::spawn(
        root,
        WriterOptions {
            interval_ms: 1000,
            ..WriterOptions::default()
        },
        stats.clone(),
        8,
    )
    .unwrap();
    let scenario = sim::load_scenario(None).unwrap();
    let start = scenario.start.timestamp_millis();
    let sampler = Sampler::spawn_with(
        Box::new(move || {
            Ok(Box::new(
                SimBackend::new(
                    &scenario,
                    None,
                    SimClock::Stepped {
                        next_ms: start,
                        step_ms: 500,
                    },
                )
                .unwrap(),
            ) as Box<dyn GpuBackend>)
        }),
        SamplerConfig {
            interval: Duration::from_millis(5),
            ..SamplerConfig::default()
        },
        SamplerHooks {
            attributor: None,
            on_sample: Some(Box::new(move |s| sender.offer(s))),
        },
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while stats.write_errors.load(Ordering::Relaxed) == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(stats.write_errors.load(Ordering::Relaxed) > 0);
    let seq = sampler.handle().latest().unwrap().sequence;
    assert!(
        sampler
            .handle()
            .wait_newer(seq, Duration::from_secs(5))
            .is_some()
    );
    assert_eq!(stats.rows(Table::Gpu), 0);
    let _: HashMap<u32, u32> = HashMap::new();
    sampler.stop();
}

#[test]
fn simulate_one_day_of_the_demo_reads_back() {
    let tmp = tempfile::tempdir().unwrap();
    let scenario = sim::load_scenario(None).unwrap();
    let s = history::simulate::simulate(&scenario, 1, tmp.path(), 1000, 10_000).unwrap();
    assert_eq!(s.nodes, 3);
    let mut gpu_rows = 0;
    for n in &scenario.nodes {
        let h = read_node_dir(&tmp.path().join(&n.name)).unwrap();
        assert_eq!(h.skipped_lines, 0);
        let gpus = h
            .gpu
            .iter()
            .map(|r| r.gpu)
            .collect::<std::collections::BTreeSet<_>>();
        // days × intervals × GPUs (a driver-level fault may cost whole intervals, none here).
        assert_eq!(h.gpu.len(), 8640 * gpus.len(), "{}", n.name);
        gpu_rows += h.gpu.len() as u64;
    }
    assert_eq!(s.rows[0], gpu_rows);
}

/// GPU rows of `hour` (hours since the epoch): the demo's first rows, moved to that hour.
fn rows_at(template: &[history::GpuRow], hour: i64) -> Vec<history::GpuRow> {
    let base = template[0].ts;
    template
        .iter()
        .map(|r| history::GpuRow {
            ts: hour * 3_600_000 + 10_000 + (r.ts - base),
            ..r.clone()
        })
        .collect()
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn finished_days_are_compacted_into_day_files() {
    // 26 hours: day 0 is over and compacted at the first row of day 1, which stays hourly.
    let tmp = tempfile::tempdir().unwrap();
    let rows = simulate(tmp.path(), 26 * 3600, WriterMode::Jsonl, false);
    let node = tmp.path().join("gpu-node-1");
    for t in ["gpu", "process"] {
        assert_eq!(
            names(&node.join(t)),
            [
                "2026-11-02.parquet",
                "2026-11-03T00.parquet",
                "2026-11-03T01.open.jsonl"
            ],
            "{t}"
        );
    }
    let listed = history::compact::compacted_from(&node.join("gpu/2026-11-02.parquet")).unwrap();
    assert_eq!(listed.len(), 24);
    assert_eq!(listed[0], "2026-11-02T00.parquet");
    // Nothing lost, nothing doubled, same order.
    let h = read_node_dir(&node).unwrap();
    assert_eq!(h.gpu, rows.gpu);
    assert_eq!(h.mig, rows.mig);
    assert_eq!(h.process, rows.process);
}

#[test]
fn interrupted_compaction_neither_loses_nor_doubles_rows() {
    let tmp = tempfile::tempdir().unwrap();
    let template = simulate(tmp.path(), 120, WriterMode::Direct, true).gpu;
    let node = tmp.path().join("gpu-node-1");
    let dir = node.join("gpu");
    for n in names(&dir) {
        fs::remove_file(dir.join(n)).unwrap();
    }
    let day0 = template[0].ts.div_euclid(86_400_000) * 24;
    let saved = tempfile::tempdir().unwrap();
    let mut expected = Vec::new();
    for h in 0..3 {
        let rows = rows_at(&template, day0 + h);
        let p = history::writer::write_parquet(&dir, day0 + h, &rows).unwrap();
        fs::copy(&p, saved.path().join(p.file_name().unwrap())).unwrap();
        expected.extend(rows);
    }
    let written = history::compact::compact_table(&dir, Table::Gpu, day0 / 24 + 1).unwrap();
    assert_eq!(written, [dir.join("2026-11-02.parquet")]);
    assert_eq!(names(&dir), ["2026-11-02.parquet"]);

    // A crash after the rename and before the deletes leaves a listed hourly file behind:
    // readers skip it, and the writer's next start deletes it without merging it again.
    fs::copy(
        saved.path().join("2026-11-02T01.parquet"),
        dir.join("2026-11-02T01.parquet"),
    )
    .unwrap();
    assert_eq!(read_node_dir(&node).unwrap().gpu, expected);
    let later = (day0 + 48) * 3_600_000;
    HistoryWriter::open(tmp.path(), "gpu-node-1", WriterOptions::default(), later).unwrap();
    assert_eq!(names(&dir), ["2026-11-02.parquet"]);
    assert_eq!(read_node_dir(&node).unwrap().gpu, expected);

    // Rows of a compacted day that come late (the clock went back) are not taken for compacted
    // ones: a listed name gets a suffix, they are read, and the next compaction merges them.
    let late = rows_at(&template, day0 + 1);
    let p = history::writer::write_parquet(&dir, day0 + 1, &late).unwrap();
    assert_eq!(p.file_name().unwrap(), "2026-11-02T01-1.parquet");
    let p = history::writer::write_parquet(&dir, day0 + 5, &late).unwrap();
    assert_eq!(p.file_name().unwrap(), "2026-11-02T05.parquet");
    let h = read_node_dir(&node).unwrap();
    assert_eq!(h.gpu.len(), expected.len() + 2 * late.len());
    HistoryWriter::open(tmp.path(), "gpu-node-1", WriterOptions::default(), later).unwrap();
    assert_eq!(names(&dir), ["2026-11-02.parquet"]);
    assert_eq!(read_node_dir(&node).unwrap().gpu.len(), h.gpu.len());
    assert_eq!(
        history::compact::compacted_from(&dir.join("2026-11-02.parquet"))
            .unwrap()
            .len(),
        5
    );

    // Retention by age removes a day file once its last hour is past the cutoff.
    let opts = WriterOptions {
        retention_ms: 24 * 3_600_000,
        ..WriterOptions::default()
    };
    HistoryWriter::open(tmp.path(), "gpu-node-1", opts, later + 3_600_000).unwrap();
    assert!(names(&dir).is_empty(), "{:?}", names(&dir));
}

#[test]
fn a_day_that_cannot_be_compacted_stays_hourly_and_recording_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    let template = simulate(tmp.path(), 120, WriterMode::Direct, true).gpu;
    let node = tmp.path().join("gpu-node-1");
    let dir = node.join("gpu");
    for n in names(&dir) {
        fs::remove_file(dir.join(n)).unwrap();
    }
    let day0 = template[0].ts.div_euclid(86_400_000) * 24;
    for h in [0, 1, 24, 25] {
        history::writer::write_parquet(&dir, day0 + h, &rows_at(&template, day0 + h)).unwrap();
    }
    // Day 0 holds a file that does not read (a torn copy, a bad disk block).
    fs::write(dir.join("2026-11-02T02.parquet"), b"not parquet").unwrap();
    let e = history::compact::compact_table(&dir, Table::Gpu, day0 / 24 + 2).unwrap_err();
    assert!(e.to_string().contains("2026-11-02T02.parquet"), "{e}");
    // Day 1 was compacted anyway; day 0 is untouched and leaves no temporary file.
    assert_eq!(
        names(&dir),
        [
            "2026-11-02T00.parquet",
            "2026-11-02T01.parquet",
            "2026-11-02T02.parquet",
            "2026-11-03.parquet"
        ]
    );
    // The exporter still opens its history (and logs the error) instead of not recording.
    let later = (day0 + 72) * 3_600_000;
    HistoryWriter::open(tmp.path(), "gpu-node-1", WriterOptions::default(), later).unwrap();
    assert!(dir.join("2026-11-02T00.parquet").exists());
}
