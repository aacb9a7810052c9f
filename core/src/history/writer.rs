//! [`HistoryWriter`]: writes the rows of one node into its folder, as `docs/history-format.md`
//! says: the lock ([`super::lock`]: one writer per folder), the manifest, one open JSONL segment
//! per table (header line, then one row per line; each table's rows of one write are appended
//! whole or not at all), hourly rotation into Parquet + zstd (by the rows' `ts` hour), recovery
//! of what a crash left, daily compaction of finished days ([`super::compact`], at open and at
//! each new hour), and retention by age and by total size.
//!
//! Rotation and crash recovery are one idempotent procedure, [`super::segments`]'s
//! `recover_table`; this module decides when it runs (at open and at each new hour).
//!
//! A table never gets a row whose `ts` is not after every row it already holds (its newest `ts`
//! is read from the files at open): a clock that went back or restarted would write a second row
//! for the same entity and interval. Such rows are dropped and counted ([`WriteReport`]).
//!
//! [`WriterMode::Direct`] skips the JSONL (the hour is kept in memory and written as Parquet at
//! rotation): for `tessera simulate`, where there is no crash to survive. Everything else is the
//! same code.
//!
//! Errors are returned ([`HistoryError`], or in a [`WriteReport`] with the rows they cost), never
//! panics; the exporter counts and logs them and keeps serving. This module does not aggregate
//! (see [`super::aggregate`]) and does not decide where the folder is.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use super::aggregate::{GpuRow, MigRow, ProcessRow, Rows};
use super::compact;
use super::files::{
    HOUR_MS, HistoryError, Manifest, file_hours, format_ms, io, list_names, remove_if_exists,
    write_atomic,
};
use super::lock::HistoryLock;
use super::reader;
use super::schema::{FORMAT_NAME, HISTORY_VERSION, HistoryRow, MANIFEST_FILE, Table};
use super::segments::{newest_ts, open_path, recover_table, repair_torn_tail, write_parquet};

/// How rows reach the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriterMode {
    /// Open JSONL segments appended every interval, Parquet at rotation (the exporter).
    Jsonl,
    /// The hour in memory, Parquet at rotation, no JSONL (`tessera simulate`).
    Direct,
}

/// Writer settings.
#[derive(Debug, Clone)]
pub struct WriterOptions {
    /// `--history.interval` in ms (recorded in the manifest).
    pub interval_ms: i64,
    /// `--history.retention`: closed files whose hour ended longer ago are deleted.
    pub retention_ms: i64,
    /// `--history.max-bytes`: the oldest closed files are deleted beyond this size.
    pub max_bytes: u64,
    pub mode: WriterMode,
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions {
            interval_ms: 10_000,
            retention_ms: 30 * 24 * HOUR_MS,
            max_bytes: 1 << 30,
            mode: WriterMode::Jsonl,
        }
    }
}

/// What one [`HistoryWriter::write`] did, by table in [`Table::ALL`] order.
#[derive(Debug, Default)]
pub struct WriteReport {
    /// Rows appended.
    pub written: [u64; 3],
    /// Rows dropped because their table already holds rows at or after their `ts` (a clock that
    /// went back or restarted): writing them would give an entity two rows for one interval.
    pub duplicates: [u64; 3],
    /// Rows that could not be written (see `errors`).
    pub lost: [u64; 3],
    /// What went wrong: rows lost, or a rotation, compaction or retention that failed (those
    /// cost no rows; they are retried at the next hour).
    pub errors: Vec<HistoryError>,
}

impl WriteReport {
    /// Rows written, in all tables.
    pub fn written_rows(&self) -> u64 {
        self.written.iter().sum()
    }

    /// Rows lost, in all tables.
    pub fn lost_rows(&self) -> u64 {
        self.lost.iter().sum()
    }

    /// Rows dropped as duplicates, in all tables.
    pub fn duplicate_rows(&self) -> u64 {
        self.duplicates.iter().sum()
    }

    /// `Err` with the first error, if there was any.
    pub fn into_result(mut self) -> Result<WriteReport, HistoryError> {
        if self.errors.is_empty() {
            Ok(self)
        } else {
            Err(self.errors.swap_remove(0))
        }
    }
}

struct Segment<R> {
    hour: i64,
    /// The open segment and its length (JSONL mode).
    file: Option<(File, u64)>,
    /// The hour's rows (direct mode).
    buffer: Vec<R>,
}

struct TableWriter<R> {
    dir: PathBuf,
    mode: WriterMode,
    seg: Option<Segment<R>>,
    /// The newest `ts` this table holds: rows at or before it are duplicates.
    newest: Option<i64>,
}

impl<R: HistoryRow> TableWriter<R> {
    fn new(node_dir: &Path, mode: WriterMode) -> Self {
        TableWriter {
            dir: node_dir.join(R::TABLE.name()),
            mode,
            seg: None,
            newest: None,
        }
    }

    /// Append rows (dropping duplicates) into `report` at index `i`; returns whether an hour was
    /// rotated.
    fn write(&mut self, rows: &[R], report: &mut WriteReport, i: usize) -> bool {
        // Rows must come after everything written; within the batch, rows of one interval share
        // their ts and intervals follow each other.
        let mut accepted: Vec<&R> = Vec::with_capacity(rows.len());
        let mut running = self.newest;
        for r in rows {
            let ts = r.ts();
            if self.newest.is_some_and(|n| ts <= n) || running.is_some_and(|n| ts < n) {
                report.duplicates[i] += 1;
            } else {
                running = Some(ts);
                accepted.push(r);
            }
        }
        let mut rotated = false;
        for chunk in
            accepted.chunk_by(|a, b| a.ts().div_euclid(HOUR_MS) == b.ts().div_euclid(HOUR_MS))
        {
            let hour = chunk[0].ts().div_euclid(HOUR_MS);
            // The new hour's rows reach its segment first, and only then is the old hour
            // closed: a kill during the (slower) conversion must not take them with it.
            let old = match self.seg.as_ref().is_some_and(|s| hour > s.hour) {
                true => self.seg.take(),
                false => None,
            };
            match self.append(hour, chunk) {
                Ok(()) => {
                    report.written[i] += chunk.len() as u64;
                    self.newest = self.newest.max(chunk.last().map(|r| r.ts()));
                }
                Err(e) => {
                    report.lost[i] += chunk.len() as u64;
                    report.errors.push(e);
                }
            }
            if old.is_some() {
                rotated = true;
                // A failed rotation costs no rows: the old segment stays on disk and is closed
                // by the next rotation or start.
                if let Err(e) = self.close(old, hour) {
                    report.errors.push(e);
                }
            }
        }
        rotated
    }

    /// Appends the rows of one hour, all or none.
    fn append(&mut self, hour: i64, rows: &[&R]) -> Result<(), HistoryError> {
        if self.seg.is_none() {
            self.start(hour)?;
        }
        let Some(seg) = self.seg.as_mut() else {
            return Ok(());
        };
        let Some((file, len)) = seg.file.as_mut() else {
            seg.buffer.extend(rows.iter().map(|r| (*r).clone()));
            return Ok(());
        };
        let path = open_path(&self.dir, seg.hour);
        let mut buf = Vec::with_capacity(rows.len() * 512);
        for row in rows {
            serde_json::to_writer(&mut buf, row).map_err(|e| HistoryError::Invalid {
                path: path.clone(),
                message: e.to_string(),
            })?;
            buf.push(b'\n');
        }
        if let Err(e) = file.write_all(&buf) {
            // Cut what part of the batch reached the file; failing that, the next start of the
            // segment cuts the torn line.
            if file.set_len(*len).is_err() {
                self.seg = None;
            }
            return Err(io(&path)(e));
        }
        *len += buf.len() as u64;
        Ok(())
    }

    fn start(&mut self, hour: i64) -> Result<(), HistoryError> {
        let file = match self.mode {
            WriterMode::Direct => None,
            WriterMode::Jsonl => {
                let path = open_path(&self.dir, hour);
                if path.exists() {
                    repair_torn_tail(&path)?;
                }
                let mut f = OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&path)
                    .map_err(io(&path))?;
                let mut len = f.metadata().map_err(io(&path))?.len();
                if len == 0 {
                    let header = format!(
                        "{{\"tessera_history\":{HISTORY_VERSION},\"table\":\"{}\"}}\n",
                        R::TABLE.name()
                    );
                    if let Err(e) = f.write_all(header.as_bytes()) {
                        let _ = f.set_len(0);
                        return Err(io(&path)(e));
                    }
                    len = header.len() as u64;
                }
                Some((f, len))
            }
        };
        self.seg = Some(Segment {
            hour,
            file,
            buffer: Vec::new(),
        });
        Ok(())
    }

    /// Closes the current segment (and any other of an hour before `current_hour`) into Parquet.
    fn rotate(&mut self, current_hour: i64) -> Result<(), HistoryError> {
        let seg = self.seg.take();
        self.close(seg, current_hour)
    }

    /// Closes `seg` (no longer the current segment), and any other open segment of an hour
    /// before `current_hour`, into Parquet.
    fn close(&self, seg: Option<Segment<R>>, current_hour: i64) -> Result<(), HistoryError> {
        let Some(seg) = seg else {
            return Ok(());
        };
        match seg.file {
            Some((file, _)) => {
                drop(file);
                recover_table::<R>(&self.dir, &list_names(&self.dir)?, current_hour)
            }
            None if seg.buffer.is_empty() => Ok(()),
            None => write_parquet(&self.dir, seg.hour, &seg.buffer).map(|_| ()),
        }
    }
}

/// Writes one node's history folder. Holds the folder's lock while it lives.
pub struct HistoryWriter {
    dir: PathBuf,
    options: WriterOptions,
    gpu: TableWriter<GpuRow>,
    mig: TableWriter<MigRow>,
    process: TableWriter<ProcessRow>,
    latest_ts: i64,
    // Last: released after the segments are closed.
    _lock: HistoryLock,
}

impl HistoryWriter {
    /// Open (creating if needed) `root/<node>`: take its lock ([`HistoryError::Locked`] when
    /// another writer holds it), check or write the manifest, recover what a crash left (stale
    /// temporary files, segments of hours before `now_ms`'s), read each table's newest `ts`,
    /// compact finished days and apply retention. Recovery and compaction errors are logged and
    /// retried at the next hour; they do not stop recording.
    pub fn open(
        root: &Path,
        node: &str,
        options: WriterOptions,
        now_ms: i64,
    ) -> Result<HistoryWriter, HistoryError> {
        if node.is_empty() || node.contains(['/', '\\']) || node == "." || node == ".." {
            return Err(HistoryError::Invalid {
                path: root.to_path_buf(),
                message: format!("node name {node:?} cannot be a folder name"),
            });
        }
        let dir = root.join(node);
        fs::create_dir_all(&dir).map_err(io(&dir))?;
        let lock = HistoryLock::acquire(&dir)?;
        for t in Table::ALL {
            let d = dir.join(t.name());
            fs::create_dir_all(&d).map_err(io(&d))?;
        }
        let manifest_path = dir.join(MANIFEST_FILE);
        // Left by a crash (or a full disk) between writing the manifest and renaming it.
        remove_if_exists(&manifest_path.with_extension("tmp"))?;
        if manifest_path.exists() {
            let m = reader::read_manifest(&dir)?;
            if m.node != node {
                return Err(HistoryError::Invalid {
                    path: manifest_path,
                    message: format!("belongs to node {:?}, not {node:?}", m.node),
                });
            }
        }
        let manifest = Manifest {
            format: FORMAT_NAME.into(),
            version: HISTORY_VERSION.into(),
            node: node.into(),
            interval_ms: options.interval_ms,
        };
        let text = serde_json::to_vec_pretty(&manifest).map_err(|e| HistoryError::Invalid {
            path: manifest_path.clone(),
            message: e.to_string(),
        })?;
        write_atomic(&manifest_path, &text)?;
        let mut w = HistoryWriter {
            gpu: TableWriter::new(&dir, options.mode),
            mig: TableWriter::new(&dir, options.mode),
            process: TableWriter::new(&dir, options.mode),
            dir,
            options,
            latest_ts: now_ms,
            _lock: lock,
        };
        if let Err(e) = w.recover(now_ms.div_euclid(HOUR_MS)) {
            log::warn!("history: recovery: {e} (retried at the next hour)");
        }
        w.gpu.newest = newest_ts::<GpuRow>(&w.gpu.dir);
        w.mig.newest = newest_ts::<MigRow>(&w.mig.dir);
        w.process.newest = newest_ts::<ProcessRow>(&w.process.dir);
        if let Some(t) = w.newest_ts().filter(|t| *t > now_ms) {
            log::warn!(
                "history: {} holds rows up to {}, after the time now ({}): rows until then are \
                 dropped as duplicates (the clock went back, or a simulated clock restarted)",
                w.dir.display(),
                format_ms(t),
                format_ms(now_ms)
            );
        }
        // A day that cannot be compacted stays hourly (readers read it as it is); it must not
        // stop recording, and the next rotation retries it (and reports the error).
        if let Err(e) = w.compact(now_ms) {
            log::warn!("history: daily compaction: {e}");
        }
        w.enforce_retention()?;
        Ok(w)
    }

    /// The node folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The newest `ts` of any table (files read at open, and rows written since).
    pub fn newest_ts(&self) -> Option<i64> {
        self.gpu
            .newest
            .max(self.mig.newest)
            .max(self.process.newest)
    }

    fn recover(&mut self, current_hour: i64) -> Result<(), HistoryError> {
        let mut first_err = None;
        for t in Table::ALL {
            let d = self.dir.join(t.name());
            let r = list_names(&d).and_then(|names| match t {
                Table::Gpu => recover_table::<GpuRow>(&d, &names, current_hour),
                Table::Mig => recover_table::<MigRow>(&d, &names, current_hour),
                Table::Process => recover_table::<ProcessRow>(&d, &names, current_hour),
            });
            if let Err(e) = r {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Append the rows of closed intervals (each table's rows all or none); rotates, compacts
    /// and applies retention when a new hour starts. Rows whose table already holds their
    /// interval are dropped; see [`WriteReport`].
    #[must_use = "rows may have been lost or dropped: see the report"]
    pub fn write(&mut self, rows: &Rows) -> WriteReport {
        let mut report = WriteReport::default();
        let mut rotated = self.gpu.write(&rows.gpu, &mut report, 0);
        rotated |= self.mig.write(&rows.mig, &mut report, 1);
        rotated |= self.process.write(&rows.process, &mut report, 2);
        if let Some(ts) = rows.gpu.iter().map(|r| r.ts).max() {
            self.latest_ts = self.latest_ts.max(ts);
        }
        if rotated {
            // Retention runs even when compaction fails (a full disk must not stay full).
            if let Err(e) = self.compact(self.latest_ts) {
                report.errors.push(e);
            }
            if let Err(e) = self.enforce_retention() {
                report.errors.push(e);
            }
        }
        report
    }

    /// Merge the hourly files of every UTC day before the one of `now_ms` into day files
    /// ([`compact`]).
    fn compact(&mut self, now_ms: i64) -> Result<(), HistoryError> {
        let day = now_ms.div_euclid(HOUR_MS).div_euclid(24);
        let mut first_err = None;
        for t in Table::ALL {
            if let Err(e) = compact::compact_table(&self.dir.join(t.name()), t, day) {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Close every open segment into Parquet and apply retention (end of `tessera simulate`).
    pub fn finish(mut self) -> Result<(), HistoryError> {
        let next = self.latest_ts.div_euclid(HOUR_MS) + 1;
        self.gpu.rotate(next)?;
        self.mig.rotate(next)?;
        self.process.rotate(next)?;
        let compacted = self.compact(self.latest_ts);
        self.enforce_retention()?;
        compacted
    }

    /// Delete closed files older than the retention, then the oldest until under `max_bytes`.
    pub fn enforce_retention(&mut self) -> Result<(), HistoryError> {
        let cutoff_hour = (self.latest_ts - self.options.retention_ms).div_euclid(HOUR_MS);
        let mut closed = Vec::new();
        let mut total = 0u64;
        for t in Table::ALL {
            let d = self.dir.join(t.name());
            for entry in fs::read_dir(&d).map_err(io(&d))? {
                let entry = entry.map_err(io(&d))?;
                let path = entry.path();
                let size = entry.metadata().map(|m| m.len()).unwrap_or(0);
                let name = entry.file_name().to_string_lossy().into_owned();
                // Hourly and day files alike: a file goes when its last hour is past the
                // cutoff; by size, the oldest first.
                match file_hours(&name) {
                    Some((_, last)) if last < cutoff_hour => remove_if_exists(&path)?,
                    Some((first, _)) => {
                        total += size;
                        closed.push((first, size, path));
                    }
                    None => total += size,
                }
            }
        }
        closed.sort();
        for (_, size, path) in closed {
            if total <= self.options.max_bytes {
                break;
            }
            remove_if_exists(&path)?;
            total = total.saturating_sub(size);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::reader::read_node_dir;
    use crate::history::segments::{CRASH_AT, CRASH_SEEN};

    /// Rows of `gpus` GPUs for the intervals ending at `ts`, one interval each.
    fn gpu_rows(ts: &[i64], gpus: u32) -> Vec<GpuRow> {
        let mut out = Vec::new();
        for &t in ts {
            for g in 0..gpus {
                out.push(GpuRow {
                    ts: t,
                    interval_ms: 10_000,
                    node: "n1".into(),
                    gpu: g,
                    uuid: format!("GPU-{g}"),
                    samples: 10,
                    model: "NVIDIA H100 80GB HBM3".into(),
                    status: "ok".into(),
                    busy_mean: Some(0.5),
                    busy_max: Some(1.0),
                    sm_active_mean: None,
                    sm_active_max: None,
                    sm_occupancy_mean: None,
                    memory_controller_mean: None,
                    memory_used_max_bytes: Some(1 << 30),
                    memory_total_bytes: Some(80 << 30),
                    power_mean_watts: Some(300.0),
                    energy_delta_joules: Some(3000.0),
                    temperature_max_celsius: Some(50.0),
                    xid_count: 0,
                    mig_enabled: Some(false),
                    tensor_active_mean: None,
                    tensor_active_max: None,
                    dram_active_mean: None,
                    fp64_active_mean: None,
                    fp32_active_mean: None,
                    fp16_active_mean: None,
                    integer_active_mean: None,
                    nvlink_tx_mean_bytes_per_second: None,
                    nvlink_rx_mean_bytes_per_second: None,
                    holders: None,
                    holder_namespace: None,
                    holder_pod: None,
                    holder_slurm_job_id: None,
                });
            }
        }
        out
    }

    const H0: i64 = 498_216 * HOUR_MS; // 2026-11-02T00

    fn open(root: &Path, now: i64) -> HistoryWriter {
        HistoryWriter::open(root, "n1", WriterOptions::default(), now).unwrap()
    }

    fn write(w: &mut HistoryWriter, gpu: Vec<GpuRow>) -> WriteReport {
        w.write(&Rows {
            gpu,
            ..Rows::default()
        })
    }

    /// Hour 0 in an open segment, then the first row of hour 1 rotates it.
    fn rotate_with_crash_at(step: u8) -> (tempfile::TempDir, Vec<GpuRow>) {
        let tmp = tempfile::tempdir().unwrap();
        let first: Vec<i64> = (1..=6).map(|i| H0 + i * 10_000).collect();
        let mut expected = gpu_rows(&first, 2);
        let mut w = open(tmp.path(), H0);
        let r = write(&mut w, expected.clone());
        assert!(r.errors.is_empty(), "{:?}", r.errors);
        CRASH_AT.with(|c| c.set(step));
        let next = gpu_rows(&[H0 + HOUR_MS + 10_000], 2);
        let r = write(&mut w, next.clone());
        CRASH_AT.with(|c| c.set(0));
        assert_eq!(r.errors.is_empty(), step == 0, "{:?}", r.errors);
        // The rows of the new hour are written whatever happened to the old one, and before
        // it is converted: a kill during the conversion does not take them.
        assert_eq!(r.written[0], 2);
        if step > 0 {
            let seen = CRASH_SEEN.with(|c| c.take());
            let header = 36; // {"tessera_history":1,"table":"gpu"}\n
            assert!(
                seen.iter()
                    .any(|(n, len)| n == "2026-11-02T01.open.jsonl" && *len > header),
                "step {step}: {seen:?}"
            );
        }
        expected.extend(next);
        drop(w); // kill -9: nothing more runs
        (tmp, expected)
    }

    #[test]
    fn a_crash_at_any_step_of_a_rotation_neither_loses_nor_doubles_rows() {
        for step in 0..=3 {
            let (tmp, expected) = rotate_with_crash_at(step);
            let dir = tmp.path().join("n1/gpu");
            // Readers see every row once at every step (a closing segment is not read).
            let h = read_node_dir(&tmp.path().join("n1")).unwrap();
            let mut got = h.gpu.clone();
            got.sort_by_key(|r| (r.ts, r.gpu));
            if step == 2 {
                // Between the segment's rename and the Parquet file's: the hour is hidden
                // until the next start finishes it.
                assert_eq!(got.len(), 2, "step {step}");
            } else {
                assert_eq!(got, expected, "step {step}");
            }
            // Restart (twice: the second finds nothing to do).
            for _ in 0..2 {
                drop(open(tmp.path(), H0 + HOUR_MS + 20_000));
                let names = list_names(&dir).unwrap();
                assert_eq!(
                    names,
                    ["2026-11-02T00.parquet", "2026-11-02T01.open.jsonl"],
                    "step {step}"
                );
                let mut got = read_node_dir(&tmp.path().join("n1")).unwrap().gpu;
                got.sort_by_key(|r| (r.ts, r.gpu));
                assert_eq!(got, expected, "step {step}");
            }
        }
    }

    #[test]
    fn recovery_is_the_same_in_every_listing_order() {
        // Every crash state of hour 0, recovered with its names in both orders.
        for step in 1..=3 {
            for reverse in [false, true] {
                let (tmp, expected) = rotate_with_crash_at(step);
                let dir = tmp.path().join("n1/gpu");
                let mut names = list_names(&dir).unwrap();
                assert!(names.len() >= 3, "{names:?}");
                if reverse {
                    names.reverse();
                }
                recover_table::<GpuRow>(&dir, &names, H0 / HOUR_MS + 1)
                    .unwrap_or_else(|e| panic!("step {step}, reverse {reverse}, {names:?}: {e}"));
                // A stale listing (files already gone) is no error either.
                recover_table::<GpuRow>(&dir, &names, H0 / HOUR_MS + 1).unwrap();
                let mut got = read_node_dir(&tmp.path().join("n1")).unwrap().gpu;
                got.sort_by_key(|r| (r.ts, r.gpu));
                assert_eq!(got, expected, "step {step}, reverse {reverse}");
            }
        }
    }

    #[test]
    fn the_same_segment_name_twice_is_converted_twice() {
        // Hour 0 closed, then rows of hour 0 again in a new segment (a new table folder's
        // newest ts is reset here by hand, as another writer's rows would): the second
        // segment has the same name but other bytes, so it is not taken for converted.
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("n1/gpu");
        let mut w = open(tmp.path(), H0);
        let _ = write(&mut w, gpu_rows(&[H0 + 10_000], 1));
        let _ = write(&mut w, gpu_rows(&[H0 + HOUR_MS + 10_000], 1));
        drop(w);
        let mut other = gpu_rows(&[H0 + 20_000], 1);
        other[0].busy_mean = Some(0.25);
        let text = format!(
            "{{\"tessera_history\":1,\"table\":\"gpu\"}}\n{}\n",
            serde_json::to_string(&other[0]).unwrap()
        );
        fs::write(dir.join("2026-11-02T00.closing.jsonl"), text).unwrap();
        drop(open(tmp.path(), H0 + 2 * HOUR_MS));
        let h = read_node_dir(&tmp.path().join("n1")).unwrap();
        assert_eq!(h.gpu.len(), 3);
        assert!(dir.join("2026-11-02T00-1.parquet").exists());
    }

    #[test]
    fn an_unparsable_segment_is_set_aside_and_recording_goes_on() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("n1/gpu");
        fs::create_dir_all(&dir).unwrap();
        fs::write(
            dir.join("2026-11-02T00.open.jsonl"),
            "{\"tessera_history\":1,\"table\":\"gpu\"}\nnot json\n{}\n",
        )
        .unwrap();
        let mut w = open(tmp.path(), H0 + 2 * HOUR_MS);
        assert!(dir.join("2026-11-02T00.open.jsonl.unreadable").exists());
        let r = write(&mut w, gpu_rows(&[H0 + 2 * HOUR_MS + 10_000], 1));
        assert_eq!(r.written[0], 1);
    }

    #[test]
    fn duplicates_are_dropped_within_a_batch_across_batches_and_restarts() {
        let tmp = tempfile::tempdir().unwrap();
        let mut w = open(tmp.path(), H0);
        let t: Vec<i64> = (1..=3).map(|i| H0 + i * 10_000).collect();
        let r = write(&mut w, gpu_rows(&t, 2));
        assert_eq!((r.written[0], r.duplicates[0]), (6, 0));
        // Same intervals again, and one that goes back inside a batch.
        let mut batch = gpu_rows(&[t[2], H0 + 40_000, H0 + 30_000], 2);
        batch.extend(gpu_rows(&[H0 + 50_000], 2));
        let r = write(&mut w, batch);
        assert_eq!((r.written[0], r.duplicates[0]), (4, 4));
        drop(w);
        // After a restart the files say where the table ends.
        let mut w = open(tmp.path(), H0);
        assert_eq!(w.newest_ts(), Some(H0 + 50_000));
        let r = write(&mut w, gpu_rows(&[H0 + 50_000, H0 + 60_000], 2));
        assert_eq!((r.written[0], r.duplicates[0]), (2, 2));
        let h = read_node_dir(&tmp.path().join("n1")).unwrap();
        let ts: Vec<i64> = h.gpu.iter().filter(|r| r.gpu == 0).map(|r| r.ts).collect();
        assert_eq!(ts, (1..=6).map(|i| H0 + i * 10_000).collect::<Vec<_>>());
    }

    #[test]
    fn a_failed_append_leaves_no_part_of_its_batch() {
        let tmp = tempfile::tempdir().unwrap();
        let mut w = open(tmp.path(), H0);
        let _ = write(&mut w, gpu_rows(&[H0 + 10_000], 2));
        let path = w.gpu.dir.join("2026-11-02T00.open.jsonl");
        let before = fs::read(&path).unwrap();
        // Swap the segment's file for one opened read-only: the append fails.
        if let Some(seg) = w.gpu.seg.as_mut()
            && let Some((f, _)) = seg.file.as_mut()
        {
            *f = File::open(&path).unwrap();
        }
        let r = write(&mut w, gpu_rows(&[H0 + 20_000], 2));
        assert_eq!((r.written[0], r.lost[0], r.errors.len()), (0, 2, 1));
        assert_eq!(fs::read(&path).unwrap(), before);
    }

    #[test]
    fn the_manifest_write_cleans_up_after_itself() {
        let tmp = tempfile::tempdir().unwrap();
        // The target is a folder: writing succeeds, the rename fails.
        let target = tmp.path().join("m.json");
        fs::create_dir(&target).unwrap();
        fs::create_dir(target.join("x")).unwrap();
        assert!(write_atomic(&target, b"{}").is_err());
        assert!(!tmp.path().join("m.tmp").exists());
    }
}
