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

use tessera_core::device::GpuBackend;
use tessera_core::history::reader::{read_node_dir, read_table_batches};
use tessera_core::history::{
    self, Aggregator, HistoryError, HistoryWriter, Rows, Table, WriterMode, WriterOptions,
};
use tessera_core::sim::{self, SimBackend, SimClock};
use tessera_core::simulate;
use tessera_exporter::history_thread::{self, HistoryStats};
use tessera_exporter::sampler::{Sampler, SamplerConfig, SamplerHooks};

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
            w.write(&rows).into_result().unwrap();
            keep(&rows);
        }
    }
    if finish {
        let rows = agg.flush().unwrap();
        w.write(&rows).into_result().unwrap();
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
    let current = format!("\"version\": {}", history::HISTORY_VERSION);
    assert!(m.contains(&current), "{m}");
    fs::write(&manifest, m.replace(&current, "\"version\": 99")).unwrap();
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
    let (sender, _thread) = history_thread::spawn(
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
            ..SamplerHooks::default()
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
    let s = simulate::simulate(&scenario, 1, tmp.path(), 1000, 10_000).unwrap();
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
    let listed = history::files::compacted_from(&node.join("gpu/2026-11-02.parquet")).unwrap();
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
        let p = history::segments::write_parquet(&dir, day0 + h, &rows).unwrap();
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
    let p = history::segments::write_parquet(&dir, day0 + 1, &late).unwrap();
    assert_eq!(p.file_name().unwrap(), "2026-11-02T01-1.parquet");
    let p = history::segments::write_parquet(&dir, day0 + 5, &late).unwrap();
    assert_eq!(p.file_name().unwrap(), "2026-11-02T05.parquet");
    let h = read_node_dir(&node).unwrap();
    assert_eq!(h.gpu.len(), expected.len() + 2 * late.len());
    HistoryWriter::open(tmp.path(), "gpu-node-1", WriterOptions::default(), later).unwrap();
    assert_eq!(names(&dir), ["2026-11-02.parquet"]);
    assert_eq!(read_node_dir(&node).unwrap().gpu.len(), h.gpu.len());
    assert_eq!(
        history::files::compacted_from(&dir.join("2026-11-02.parquet"))
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
        history::segments::write_parquet(&dir, day0 + h, &rows_at(&template, day0 + h)).unwrap();
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

// ---- Hardening (issue 17): each test injects a fault the writer must survive. ----

/// An open segment as the writer leaves it: the header line, then one row per line.
fn write_segment<R: serde::Serialize>(path: &Path, table: &str, rows: &[R]) {
    let mut text = format!("{{\"tessera_history\":1,\"table\":\"{table}\"}}\n");
    for r in rows {
        text.push_str(&serde_json::to_string(r).unwrap());
        text.push('\n');
    }
    fs::write(path, text).unwrap();
}

fn shift<R: Clone>(
    rows: &[R],
    ts: impl Fn(&R) -> i64,
    set: impl Fn(&mut R, i64),
    by: i64,
) -> Vec<R> {
    rows.iter()
        .map(|r| {
            let mut r = r.clone();
            let t = ts(&r);
            set(&mut r, t + by);
            r
        })
        .collect()
}

/// Rows of every table, the same intervals as `template` moved to `hour` (hours since the epoch).
fn all_rows_at(template: &Rows, hour: i64) -> Rows {
    let base = template.gpu[0].ts;
    let by = hour * 3_600_000 + 10_000 - base;
    Rows {
        gpu: shift(&template.gpu, |r| r.ts, |r, t| r.ts = t, by),
        mig: shift(&template.mig, |r| r.ts, |r, t| r.ts = t, by),
        process: shift(&template.process, |r| r.ts, |r, t| r.ts = t, by),
    }
}

fn sorted_keys(h: &history::NodeHistory) -> Vec<(i64, u32)> {
    let mut k: Vec<(i64, u32)> = h.gpu.iter().map(|r| (r.ts, r.gpu)).collect();
    k.sort();
    k
}

#[test]
fn a_kill_during_rotation_is_recovered_whatever_the_directory_order() {
    // A kill -9 while an hour is converted leaves its open segment and a stale
    // `<hour>.parquet.tmp` in every table folder. Eight past hours, the two files created in
    // either order (so the directory lists them in both orders, whatever the file system does).
    let tmp = tempfile::tempdir().unwrap();
    let template = simulate(tmp.path(), 120, WriterMode::Direct, true);
    let node = tmp.path().join("gpu-node-1");
    for t in Table::ALL {
        for n in names(&node.join(t.name())) {
            fs::remove_file(node.join(t.name()).join(n)).unwrap();
        }
    }
    let hour0 = template.gpu[0].ts.div_euclid(3_600_000);
    let mut expected = Rows::default();
    for h in 0..8 {
        let rows = all_rows_at(&template, hour0 + h);
        let name = history::files::hour_name(hour0 + h);
        for t in Table::ALL {
            let dir = node.join(t.name());
            let open = dir.join(format!("{name}.open.jsonl"));
            let stale = dir.join(format!("{name}.parquet.tmp"));
            let segment = || match t {
                Table::Gpu => write_segment(&open, "gpu", &rows.gpu),
                Table::Mig => write_segment(&open, "mig", &rows.mig),
                Table::Process => write_segment(&open, "process", &rows.process),
            };
            if h % 2 == 0 {
                fs::write(&stale, b"PAR1 half a file").unwrap();
                segment();
            } else {
                segment();
                fs::write(&stale, b"PAR1 half a file").unwrap();
            }
        }
        expected.gpu.extend(rows.gpu);
        expected.mig.extend(rows.mig);
        expected.process.extend(rows.process);
    }
    let later = (hour0 + 9) * 3_600_000;
    // The first start after the crash opens at once (no table-by-table retries).
    HistoryWriter::open(tmp.path(), "gpu-node-1", WriterOptions::default(), later).unwrap();
    for t in Table::ALL {
        let left: Vec<String> = names(&node.join(t.name()))
            .into_iter()
            .filter(|n| !n.ends_with(".parquet"))
            .collect();
        assert!(left.is_empty(), "{}: {left:?}", t.name());
    }
    let h = read_node_dir(&node).unwrap();
    assert_eq!(h.gpu, expected.gpu);
    assert_eq!(h.mig, expected.mig);
    assert_eq!(h.process, expected.process);
    // A second start finds nothing to do and changes nothing.
    HistoryWriter::open(tmp.path(), "gpu-node-1", WriterOptions::default(), later).unwrap();
    assert_eq!(read_node_dir(&node).unwrap().gpu, expected.gpu);
}

#[test]
fn a_second_writer_of_one_node_folder_is_refused_until_the_first_is_gone() {
    let tmp = tempfile::tempdir().unwrap();
    let first = HistoryWriter::open(tmp.path(), "gpu-node-1", WriterOptions::default(), 0).unwrap();
    let e = HistoryWriter::open(tmp.path(), "gpu-node-1", WriterOptions::default(), 0)
        .err()
        .expect("a second writer of the same folder is refused");
    let msg = e.to_string();
    assert!(
        msg.contains(&tmp.path().join("gpu-node-1").display().to_string()),
        "{msg}"
    );
    assert!(
        msg.contains(&format!("pid {}", std::process::id())),
        "{msg}"
    );
    assert!(msg.contains("in use"), "{msg}");
    // Another node's folder under the same root is not this one.
    HistoryWriter::open(tmp.path(), "gpu-node-2", WriterOptions::default(), 0).unwrap();
    drop(first);
    HistoryWriter::open(tmp.path(), "gpu-node-1", WriterOptions::default(), 0).unwrap();
}

/// `tessera-exporter --backend sim` writing history under `dir`, stderr piped.
fn exporter_on(dir: &Path, extra: &[&str]) -> std::process::Child {
    std::process::Command::new(env!("CARGO_BIN_EXE_tessera-exporter"))
        .args([
            "--backend",
            "sim",
            "--sample.interval",
            "20ms",
            "--sim.speed",
            "50",
            "--history.interval",
            "1s",
            "--web.listen-address",
            "127.0.0.1:0",
            "--history.dir",
        ])
        .arg(dir)
        .args(extra)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starting tessera-exporter")
}

/// Waits until `child` exits (up to `secs`); its status, or None while it still runs.
fn wait_exit(child: &mut std::process::Child, secs: u64) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return Some(s);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn stderr_of(child: &mut std::process::Child) -> String {
    let mut s = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut s);
    }
    s
}

#[test]
fn a_second_exporter_on_one_history_folder_fails_and_a_killed_one_leaves_no_lock() {
    let tmp = tempfile::tempdir().unwrap();
    let node = tmp.path().join("gpu-node-1");
    let mut first = exporter_on(tmp.path(), &[]);
    // Drain its stderr so it never blocks on a full pipe.
    let first_err = first.stderr.take().unwrap();
    std::thread::spawn(move || std::io::copy(&mut { first_err }, &mut std::io::sink()));
    let deadline = Instant::now() + Duration::from_secs(30);
    while !node
        .join("gpu")
        .read_dir()
        .is_ok_and(|mut d| d.next().is_some())
    {
        assert!(
            Instant::now() < deadline,
            "the first exporter writes no history"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut second = exporter_on(tmp.path(), &[]);
    let status = wait_exit(&mut second, 20);
    if status.is_none() {
        let _ = second.kill();
        let _ = first.kill();
        let err = stderr_of(&mut second);
        panic!("a second exporter on the same history folder keeps running:\n{err}");
    }
    let err = stderr_of(&mut second);
    assert_eq!(status.unwrap().code(), Some(2), "{err}");
    assert!(err.contains(&node.display().to_string()), "{err}");
    assert!(err.contains(&format!("pid {}", first.id())), "{err}");
    // kill -9: the kernel releases the lock with the process.
    first.kill().unwrap();
    first.wait().unwrap();
    let mut third = exporter_on(tmp.path(), &[]);
    let status = wait_exit(&mut third, 3);
    let _ = third.kill();
    let err = stderr_of(&mut third);
    assert!(
        status.is_none(),
        "exited after a killed holder: {status:?}\n{err}"
    );
    let _ = third.wait();
}

#[test]
fn a_failed_manifest_write_leaves_no_temporary_file() {
    // Disk full at start, injected with a file size limit of 0 (writes fail with EFBIG; the
    // signal it would raise is ignored, and ignored signals stay ignored across exec).
    let tmp = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new("sh")
        .args([
            "-c",
            "trap '' XFSZ; ulimit -f 0; exec \"$0\" \"$@\"",
            env!("CARGO_BIN_EXE_tessera-exporter"),
            "--backend",
            "sim",
            "--sample.interval",
            "20ms",
            "--sim.speed",
            "50",
            "--history.interval",
            "1s",
            "--web.listen-address",
            "127.0.0.1:0",
            "--history.dir",
        ])
        .arg(tmp.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let seen = Arc::new(std::sync::Mutex::new(String::new()));
    let s2 = seen.clone();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            s2.lock().unwrap().push_str(&(line + "\n"));
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while !seen.lock().unwrap().contains("tessera-history") {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("no history error logged:\n{}", seen.lock().unwrap());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let node = tmp.path().join("gpu-node-1");
    let left: Vec<String> = names(&node)
        .into_iter()
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "{left:?}\n{}", seen.lock().unwrap());
    // A temporary manifest a kill left behind is removed by the next start.
    fs::write(node.join("tessera-history.tmp"), b"").unwrap();
    HistoryWriter::open(tmp.path(), "gpu-node-1", WriterOptions::default(), 0).unwrap();
    assert!(!node.join("tessera-history.tmp").exists());
}

#[test]
fn a_clock_that_restarts_does_not_write_an_interval_twice() {
    let tmp = tempfile::tempdir().unwrap();
    let scenario = sim::load_scenario(None).unwrap();
    let start = scenario.start.timestamp_millis();
    let run = |w: &mut HistoryWriter, seconds: i64| {
        // A fresh backend and aggregator from the scenario's start: the clock restarted.
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
        let mut agg = Aggregator::new(&inv.node, 10_000);
        for _ in 0..seconds {
            let s = backend.sample().unwrap();
            if let Some(rows) = agg.push(&inv, &s, &attribution) {
                let _ = w.write(&rows);
            }
        }
    };
    let mut w =
        HistoryWriter::open(tmp.path(), "gpu-node-1", WriterOptions::default(), start).unwrap();
    run(&mut w, 300);
    // Within one run (a backend re-created on a virtual clock that starts over) ...
    run(&mut w, 600);
    drop(w);
    // ... and across a restart of the exporter on the same --sim.time.
    let mut w =
        HistoryWriter::open(tmp.path(), "gpu-node-1", WriterOptions::default(), start).unwrap();
    run(&mut w, 900);
    drop(w);
    let h = read_node_dir(&tmp.path().join("gpu-node-1")).unwrap();
    let keys = sorted_keys(&h);
    let mut unique = keys.clone();
    unique.dedup();
    assert_eq!(keys.len(), unique.len(), "duplicate (ts, gpu) keys");
    // Nothing is lost either: every interval of the longest run is there once.
    assert_eq!(unique.len(), 4 * 89);
    let mut mig: Vec<_> = h
        .mig
        .iter()
        .map(|r| (r.ts, r.gpu, r.gpu_instance, r.compute_instance))
        .collect();
    let n = mig.len();
    mig.sort();
    mig.dedup();
    assert_eq!(mig.len(), n, "duplicate MIG keys");
}

#[test]
fn simulating_twice_into_one_folder_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let scenario = sim::load_scenario(None).unwrap();
    simulate::simulate_for(&scenario, 600_000, tmp.path(), 1000, 10_000).unwrap();
    let e = simulate::simulate_for(&scenario, 600_000, tmp.path(), 1000, 10_000)
        .expect_err("a second simulation over the same intervals is refused");
    let msg = e.to_string();
    assert!(
        msg.contains("gpu-node-") && msg.contains("empty folder"),
        "{msg}"
    );
}

#[test]
fn tessera_simulate_into_a_folder_an_exporter_writes_is_refused_naming_its_pid() {
    // The exporter (here: its writer) holds gpu-node-1's folder; `tessera simulate` of the demo
    // scenario into the same root would write that node's rows beside it.
    let tmp = tempfile::tempdir().unwrap();
    let scenario = sim::load_scenario(None).unwrap();
    let node = scenario.nodes[0].name.clone();
    let held = HistoryWriter::open(tmp.path(), &node, WriterOptions::default(), 0).unwrap();
    let e = simulate::simulate_for(&scenario, 600_000, tmp.path(), 1000, 10_000)
        .expect_err("simulating into a folder another writer holds is refused");
    let msg = e.to_string();
    assert!(matches!(e, HistoryError::Locked { .. }), "{msg}");
    assert!(
        msg.contains(&tmp.path().join(&node).display().to_string()),
        "{msg}"
    );
    assert!(
        msg.contains(&format!("pid {}", std::process::id())),
        "{msg}"
    );
    // Nothing was written into the held folder.
    assert!(names(&tmp.path().join(&node).join("gpu")).is_empty());
    // (The scenario's other nodes were simulated: their folders are free.)
    drop(held);
    HistoryWriter::open(tmp.path(), &node, WriterOptions::default(), 0).unwrap();
}

#[test]
fn every_lost_batch_is_logged_with_counts_and_rate_limited() {
    crate::support::logs::install();
    let tmp = tempfile::tempdir().unwrap();
    // A file where the folder should be: every batch of rows is lost.
    let root = tmp.path().join("not-a-folder");
    fs::write(&root, b"").unwrap();
    let stats = Arc::new(HistoryStats::default());
    let (sender, thread) = history_thread::spawn(
        root.clone(),
        WriterOptions {
            interval_ms: 1000,
            ..WriterOptions::default()
        },
        stats.clone(),
        1024,
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
            interval: Duration::from_millis(2),
            ..SamplerConfig::default()
        },
        SamplerHooks {
            attributor: None,
            on_sample: Some(Box::new(move |s| sender.offer(s))),
            ..SamplerHooks::default()
        },
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    sampler.stop();
    thread.join();
    let root_name = root.display().to_string();
    let lines: Vec<String> = crate::support::logs::lines(log::Level::Info)
        .into_iter()
        .filter(|l| l.contains(&root_name) && l.contains(" lost "))
        .collect();
    // Every lost batch is in exactly one line, with its rows by table ...
    let batches: u64 = lines
        .iter()
        .map(|l| {
            let n = l
                .split(" batch")
                .next()
                .and_then(|s| s.rsplit(' ').next())
                .and_then(|n| n.parse::<u64>().ok());
            n.unwrap_or_else(|| panic!("no batch count in {l:?}"))
        })
        .sum();
    assert!(
        batches >= 100,
        "{batches} batches lost in 1.5 s? {lines:#?}"
    );
    assert!(
        lines
            .iter()
            .all(|l| l.contains("gpu") && l.contains("rows")),
        "{lines:#?}"
    );
    // ... every batch the stats count is in a line ...
    assert_eq!(
        batches,
        stats.lost_batches.load(Ordering::Relaxed),
        "{lines:#?}"
    );
    let rows: u64 = lines
        .iter()
        .map(|l| {
            ["gpu ", "mig ", "process "]
                .iter()
                .map(|k| {
                    let after = l.split(k).nth(1).unwrap_or("");
                    let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
                    digits.parse::<u64>().unwrap_or(0)
                })
                .sum::<u64>()
        })
        .sum();
    assert_eq!(rows, stats.lost_rows.load(Ordering::Relaxed), "{lines:#?}");
    assert!(
        rows >= batches * 4,
        "4 GPUs: {rows} rows in {batches} batches"
    );
    // ... and far fewer lines than batches: the first at once, then at most one per period.
    assert!(lines.len() <= 3, "{lines:#?}");
}

/// Copy a folder tree (the history fixtures are small).
fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &target);
        } else {
            fs::copy(e.path(), &target).unwrap();
        }
    }
}

#[test]
fn version_1_history_reads_with_the_gpm_columns_null_and_a_version_2_writer_adds_to_it() {
    // fixtures/demo-history is version 1 (written before the GPM columns): read as it is, the
    // columns it could not know are null, never 0.
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/demo-history/lab-a");
    let old = read_node_dir(&fixture).unwrap();
    assert_eq!(old.manifest.version, 1);
    assert!(!old.gpu.is_empty());
    assert!(old.gpu.iter().any(|r| r.sm_active_mean.is_some()));
    assert!(old.gpu.iter().all(|r| r.tensor_active_mean.is_none()
        && r.dram_active_mean.is_none()
        && r.nvlink_tx_mean_bytes_per_second.is_none()));
    for t in [Table::Gpu, Table::Mig, Table::Process] {
        read_table_batches(&fixture, t).unwrap();
    }

    // An exporter of version 2 upgraded in place: it writes version 2 rows beside the old files.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("lab-a");
    copy_tree(&fixture, &dir);
    let last = old.gpu.iter().map(|r| r.ts).max().unwrap();
    let later = last + 3_600_000;
    let mut w = HistoryWriter::open(
        tmp.path(),
        "lab-a",
        WriterOptions {
            interval_ms: old.manifest.interval_ms,
            retention_ms: i64::MAX / 4,
            ..WriterOptions::default()
        },
        later,
    )
    .unwrap();
    let mut row = old.gpu.iter().find(|r| r.ts == last).unwrap().clone();
    row.ts = later;
    row.tensor_active_mean = Some(0.42);
    row.dram_active_mean = Some(0.21);
    w.write(&Rows {
        gpu: vec![row],
        ..Rows::default()
    })
    .into_result()
    .unwrap();
    w.finish().unwrap();
    let both = read_node_dir(&dir).unwrap();
    assert_eq!(both.manifest.version, u64::from(history::HISTORY_VERSION));
    assert_eq!(both.gpu.len(), old.gpu.len() + 1);
    let new: Vec<_> = both.gpu.iter().filter(|r| r.ts == later).collect();
    assert_eq!(new.len(), 1);
    assert_eq!(new[0].tensor_active_mean, Some(0.42));
    assert!(
        both.gpu
            .iter()
            .filter(|r| r.ts < later)
            .all(|r| r.tensor_active_mean.is_none())
    );
    // And as arrow batches, the old files' missing columns are null columns of the right type.
    let batches = read_table_batches(&dir, Table::Gpu).unwrap().0;
    let nonnull: usize = batches
        .iter()
        .map(|b| {
            let c = b.column(b.schema().index_of("tensor_active_mean").unwrap());
            c.len() - c.null_count()
        })
        .sum();
    assert_eq!(nonnull, 1);
}

#[test]
fn the_gpm_pipes_are_recorded_per_gpu_and_per_mig_instance() {
    // gpu-node-1 of the demo: H100s (GPM) with a MIG-partitioned one.
    let tmp = tempfile::tempdir().unwrap();
    let rows = simulate(tmp.path(), 60, WriterMode::Jsonl, true);
    let back = read_node_dir(&tmp.path().join("gpu-node-1")).unwrap();
    assert_eq!(back.gpu, rows.gpu);
    assert!(back.gpu.iter().all(|r| r.tensor_active_mean.is_some()
        && r.dram_active_mean.is_some()
        && r.fp64_active_mean.is_some()
        && r.nvlink_rx_mean_bytes_per_second.is_some()));
    // Training on GPU 0 works the tensor pipes.
    let g0: Vec<_> = back.gpu.iter().filter(|r| r.gpu == 0).collect();
    assert!(g0.iter().any(|r| r.tensor_active_mean.unwrap() > 0.0));
    assert!(
        g0.iter()
            .all(|r| r.tensor_active_max >= r.tensor_active_mean)
    );
    assert!(!back.mig.is_empty());
    assert!(
        back.mig
            .iter()
            .all(|r| r.tensor_active_mean.is_some() && r.dram_active_mean.is_some())
    );
}
