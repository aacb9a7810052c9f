//! Crash-safety soak of the history writer: the exporter on the simulator at high speed, killed
//! with SIGKILL at random moments (half of them aimed at an hourly rotation) and restarted, then
//! every history row read back (the exporter's strict reader, and `tessera ingest --format json`
//! as a second reader) and checked: no interval lost beyond the one in progress at each kill,
//! no (entity, ts) key twice.
//!
//! The virtual clock: each run starts (`--sim.time`) one millisecond after the last sample the
//! killed run printed (`--watch`), so the node's timeline goes on where the sampler stopped and
//! nothing the sampler saw is skipped; an aimed cycle instead starts 20 virtual seconds before the
//! next UTC hour (a jump, which is not counted as lost), so that a rotation comes within a second.
//! A run's intervals are those from its first sample to its last; the interval in progress at a
//! kill is the one holding the last sample, and the one that last sample closed (the writer may
//! be writing it). The last run is stopped with SIGTERM (a clean stop writes its interval in
//! progress).
//!
//! CI runs a short version (about 20 s). `scripts/soak.sh` runs a long one against release
//! binaries; the settings come from the environment: `SOAK_SECONDS`, `SOAK_SPEED` (virtual
//! seconds per second; one sample per virtual second), `SOAK_EXPORTER` and `SOAK_TESSERA`
//! (binaries; default: this workspace's debug builds), `SOAK_DIR` (kept output; default a
//! temporary folder), `SOAK_SEED`, `SOAK_MAX_RUN_MS`. The figures are printed and written to
//! `<dir>/soak-summary.json`.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tessera_core::history::files::hour_name;
use tessera_core::history::reader::read_node_dir;
use tessera_e2e::{bin, run};

const HOUR_MS: i64 = 3_600_000;
const INTERVAL_MS: i64 = 10_000;
/// 2026-11-02T23:59:00Z: the first rotation, and a day's compaction, come within a minute.
const FIRST_MS: i64 = 1_793_577_600_000 + 86_400_000 - 60_000;

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// RFC 3339 with milliseconds, for `--sim.time`.
fn rfc3339(ms: i64) -> String {
    format!(
        "{}:{:02}:{:02}.{:03}Z",
        hour_name(ms.div_euclid(HOUR_MS)),
        ms.rem_euclid(HOUR_MS) / 60_000,
        ms.rem_euclid(60_000) / 1000,
        ms.rem_euclid(1000)
    )
}

/// xorshift64*: no dependency, reproducible from `SOAK_SEED`.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// The end of the interval holding `t` (rows hold `(end − interval, end]`).
fn interval_end(t: i64) -> i64 {
    (t + INTERVAL_MS - 1).div_euclid(INTERVAL_MS) * INTERVAL_MS
}

/// One exporter process and the sample times it printed.
struct Running {
    child: Child,
    samples: Arc<Mutex<Vec<i64>>>,
    reader: std::thread::JoinHandle<()>,
}

fn start(exporter: &Path, dir: &Path, at_ms: i64, speed: f64, log: &Path) -> Running {
    let stderr = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    let mut child = Command::new(exporter)
        .args(["--backend", "sim", "--sim.speed"])
        .arg(speed.to_string())
        .arg("--sample.interval")
        .arg(format!("{}ms", 1000.0 / speed))
        .args(["--sim.time", &rfc3339(at_ms)])
        .args(["--history.interval", "10s", "--history.dir"])
        .arg(dir)
        .args([
            "--watch",
            "--format",
            "json",
            "--web.listen-address",
            "127.0.0.1:0",
            "--log.level",
            "info",
        ])
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("starting tessera-exporter");
    let out = child.stdout.take().unwrap();
    let samples = Arc::new(Mutex::new(Vec::new()));
    let s = samples.clone();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            // `{"timestamp_ms":N,...}`; a torn last line (the kill) does not parse.
            let Some(rest) = line.strip_prefix("{\"timestamp_ms\":") else {
                continue;
            };
            let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
            if line.ends_with('}')
                && let Ok(t) = digits.parse::<i64>()
            {
                s.lock().unwrap().push(t);
            }
        }
    });
    Running {
        child,
        samples,
        reader,
    }
}

/// Stops a run (SIGKILL, or SIGTERM for a clean stop) and returns its sample times.
fn stop(mut r: Running, clean: bool) -> Vec<i64> {
    if clean {
        let status = Command::new("kill")
            .args(["-TERM", &r.child.id().to_string()])
            .status()
            .expect("running kill");
        assert!(status.success());
        let deadline = Instant::now() + Duration::from_secs(30);
        while r.child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "no clean stop within 30 s");
            std::thread::sleep(Duration::from_millis(20));
        }
    } else {
        r.child.kill().unwrap();
        r.child.wait().unwrap();
    }
    r.reader.join().unwrap();
    std::mem::take(&mut *r.samples.lock().unwrap())
}

/// Waits until the run printed a sample at or after `t` (or `limit` passed); whether it did.
fn wait_sample(r: &Running, t: i64, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if r.samples.lock().unwrap().last().is_some_and(|&s| s >= t) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    false
}

#[derive(Debug, Default)]
struct Figures {
    restarts: u64,
    aimed_at_rotation: u64,
    hours_rotated: u64,
    expected: u64,
    found: u64,
    lost: u64,
    lost_in_progress: u64,
    lost_beyond: u64,
    duplicated: [u64; 3],
    rows: [u64; 3],
    /// GPU rows of intervals after a run's last printed sample and before the next run's first
    /// (samples the killed run took but `--watch` had not printed yet).
    after_last_printed: u64,
    /// GPU rows of intervals no run can have sampled (must be 0).
    outside: u64,
}

#[test]
fn history_survives_kill_9_at_random_moments() {
    let seconds: u64 = env("SOAK_SECONDS", 20);
    let speed: f64 = env("SOAK_SPEED", 20.0);
    let max_run_ms: u64 = env("SOAK_MAX_RUN_MS", 2500);
    let seed: u64 = env(
        "SOAK_SEED",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
            | 1,
    );
    let exporter = std::env::var_os("SOAK_EXPORTER").map_or_else(
        || PathBuf::from(bin("tessera-exporter", "tessera-exporter").get_program()),
        PathBuf::from,
    );
    let tessera = std::env::var_os("SOAK_TESSERA").map_or_else(
        || PathBuf::from(bin("tessera", "tessera").get_program()),
        PathBuf::from,
    );
    let tmp = tempfile::tempdir().unwrap();
    let dir = std::env::var_os("SOAK_DIR").map_or_else(|| tmp.path().to_path_buf(), PathBuf::from);
    std::fs::create_dir_all(&dir).unwrap();
    let history = dir.join("history");
    let log = dir.join("exporter.log");
    println!(
        "soak: {seconds} s at speed {speed}, seed {seed}, history in {}",
        history.display()
    );

    let mut rng = Rng(seed);
    let began = Instant::now();
    let mut next_ms = FIRST_MS;
    // (first sample, last sample, killed) of every run that sampled.
    let mut runs: Vec<(i64, i64, bool)> = Vec::new();
    let mut figures = Figures::default();
    loop {
        let last_cycle = began.elapsed() >= Duration::from_secs(seconds);
        let aimed = !last_cycle && rng.below(2) == 0;
        if aimed {
            // Jump to 20 virtual seconds before the next hour.
            let hour_end = (next_ms.div_euclid(HOUR_MS) + 1) * HOUR_MS;
            next_ms = next_ms.max(hour_end - 20_000);
        }
        let r = start(&exporter, &history, next_ms, speed, &log);
        if aimed {
            // The rotation starts when the first row of the new hour arrives: at the first
            // sample after its first interval. Kill 0–30 ms after that sample was printed.
            let hour_end = (next_ms.div_euclid(HOUR_MS) + 1) * HOUR_MS;
            let real = Duration::from_secs_f64(60.0 / speed + 10.0);
            if wait_sample(&r, hour_end + INTERVAL_MS, real) {
                figures.aimed_at_rotation += 1;
            }
            std::thread::sleep(Duration::from_millis(rng.below(31)));
        } else if !last_cycle {
            std::thread::sleep(Duration::from_millis(100 + rng.below(max_run_ms)));
        } else {
            std::thread::sleep(Duration::from_millis(1500));
        }
        let samples = stop(r, last_cycle);
        if let (Some(&first), Some(&last)) = (samples.first(), samples.last()) {
            runs.push((first, last, !last_cycle));
            next_ms = last + 1;
        }
        if last_cycle {
            break;
        }
        figures.restarts += 1;
    }

    // Every row, read by the exporter's strict reader.
    let node = history.join("gpu-node-1");
    let h = read_node_dir(&node).unwrap_or_else(|e| panic!("reading {}: {e}", node.display()));
    figures.rows = [
        h.gpu.len() as u64,
        h.mig.len() as u64,
        h.process.len() as u64,
    ];
    let mut found: BTreeMap<u32, BTreeSet<i64>> = BTreeMap::new();
    for r in &h.gpu {
        if !found.entry(r.gpu).or_default().insert(r.ts) {
            figures.duplicated[0] += 1;
        }
    }
    let mut mig = BTreeSet::new();
    for r in &h.mig {
        if !mig.insert((r.ts, r.gpu, r.gpu_instance, r.compute_instance)) {
            figures.duplicated[1] += 1;
        }
    }
    let mut process = BTreeSet::new();
    for r in &h.process {
        if !process.insert((r.ts, r.gpu, r.pid, r.gpu_instance, r.compute_instance)) {
            figures.duplicated[2] += 1;
        }
    }
    // Intervals expected: every interval each run sampled, for every GPU.
    let gpus: Vec<u32> = found.keys().copied().collect();
    assert_eq!(gpus.len(), 4, "GPUs of gpu-node-1: {gpus:?}");
    let mut expected = BTreeSet::new();
    let mut in_progress = BTreeSet::new();
    // `--watch` prints from its own thread and may be a few samples behind the sampler, so a run
    // may have sampled (and the history thread written) intervals after its last printed sample:
    // those up to the next run's first sample are its own, not required but allowed.
    let mut allowed = Vec::new();
    for (i, &(_, last, _)) in runs.iter().enumerate() {
        let until = runs
            .get(i + 1)
            .map_or(i64::MAX, |r| interval_end(r.0) - INTERVAL_MS);
        allowed.push((interval_end(last), until));
    }
    for &(first, last, killed) in &runs {
        let mut e = interval_end(first);
        while e <= interval_end(last) {
            expected.insert(e);
            e += INTERVAL_MS;
        }
        if killed {
            in_progress.insert(interval_end(last));
            in_progress.insert(interval_end(last) - INTERVAL_MS);
        }
    }
    let mut hours = BTreeSet::new();
    let mut missing_beyond = Vec::new();
    let mut outside = Vec::new();
    for g in &gpus {
        let f = &found[g];
        for e in &expected {
            figures.expected += 1;
            hours.insert(e.div_euclid(HOUR_MS));
            if f.contains(e) {
                figures.found += 1;
            } else {
                figures.lost += 1;
                if in_progress.contains(e) {
                    figures.lost_in_progress += 1;
                } else {
                    figures.lost_beyond += 1;
                    missing_beyond.push((*g, rfc3339(*e)));
                }
            }
        }
        // Nothing outside the runs' intervals either.
        for t in f.difference(&expected) {
            if allowed
                .iter()
                .any(|&(after, until)| *t > after && *t <= until)
            {
                figures.after_last_printed += 1;
            } else {
                figures.outside += 1;
                outside.push((*g, rfc3339(*t)));
            }
        }
    }
    figures.hours_rotated = hours.len().saturating_sub(1) as u64;

    // The analyzer's reader sees the same rows.
    let (out, stdout, stderr) = run({
        let mut c = Command::new(&tessera);
        c.args(["ingest", "--format", "json", "--source"])
            .arg(format!("history:{}", node.display()));
        c
    });
    assert!(out.status.success(), "tessera ingest: {stderr}");
    let ingest: Value = serde_json::from_str(&stdout).unwrap();
    let gpu_table = ingest["tables"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["table"] == "gpu"))
        .cloned()
        .unwrap_or(Value::Null);

    let summary = json!({
        "seconds": seconds,
        "speed": speed,
        "seed": seed,
        "restarts": figures.restarts,
        "kills_aimed_at_a_rotation": figures.aimed_at_rotation,
        "hours_rotated": figures.hours_rotated,
        "gpu_intervals_expected": figures.expected,
        "gpu_intervals_found": figures.found,
        "gpu_intervals_lost": figures.lost,
        "lost_in_progress_at_a_kill": figures.lost_in_progress,
        "lost_beyond_the_interval_in_progress": figures.lost_beyond,
        "duplicated_rows": {"gpu": figures.duplicated[0], "mig": figures.duplicated[1], "process": figures.duplicated[2]},
        "rows": {"gpu": figures.rows[0], "mig": figures.rows[1], "process": figures.rows[2]},
        "gpu_rows_after_the_last_printed_sample": figures.after_last_printed,
        "gpu_rows_at_intervals_no_run_sampled": figures.outside,
        "ingest_gpu_rows": gpu_table["rows"],
        "ingest_torn_lines": ingest["torn_lines"],
        "ingest_warnings": ingest["warnings"],
    });
    let text = serde_json::to_string_pretty(&summary).unwrap();
    std::fs::File::create(dir.join("soak-summary.json"))
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .unwrap();
    println!("{text}");

    assert!(figures.restarts >= 3, "only {} restarts", figures.restarts);
    assert_eq!(
        figures.outside,
        0,
        "rows at intervals no run sampled (seed {seed}): {:?}",
        &outside[..outside.len().min(10)]
    );
    assert_eq!(
        figures.lost_beyond, 0,
        "lost beyond the interval in progress (seed {seed}): {missing_beyond:?}"
    );
    assert_eq!(figures.duplicated, [0, 0, 0], "duplicates (seed {seed})");
    assert!(
        figures.lost_in_progress <= 2 * 4 * figures.restarts,
        "{figures:?}"
    );
    assert_eq!(
        gpu_table["rows"].as_u64(),
        Some(figures.rows[0]),
        "tessera ingest reads another number of GPU rows: {gpu_table}"
    );
    assert_eq!(gpu_table["entities"].as_u64(), Some(4), "{gpu_table}");
}
