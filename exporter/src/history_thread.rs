//! The exporter's history thread: fed off the sampler's hot path by a bounded channel, it turns
//! snapshots into interval rows ([`Aggregator`]) and writes them ([`HistoryWriter`]). It opens the
//! folder at the first snapshot (retrying with backoff), and reports lost and duplicate rows in
//! rate-limited log lines with counts ([`RowReport`]).
//!
//! The format, the writer and the reader are `tessera_core::history`; this module only runs
//! them on a thread beside the sampler and counts what happened for the self-metrics.

use tessera_core::history::{
    Aggregator, HistoryError, HistoryWriter, Rows, Table, WriteReport, WriterOptions,
};

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::sampler::Snapshot;

/// Counters of the history thread, read by the self-metrics.
#[derive(Debug, Default)]
pub struct HistoryStats {
    /// Rows written, by table (in [`Table::ALL`] order).
    pub rows_written: [AtomicU64; 3],
    /// Failed writes (disk full, read-only folder, …), and batches lost while the folder could
    /// not be opened.
    pub write_errors: AtomicU64,
    /// Samples dropped because the history thread was behind (full channel).
    pub dropped_samples: AtomicU64,
    /// Batches of rows (one per interval) of which some or all rows were lost.
    pub lost_batches: AtomicU64,
    /// Rows lost (all tables).
    pub lost_rows: AtomicU64,
    /// Rows dropped because their table already held their interval (a clock that went back or
    /// restarted).
    pub duplicate_rows: AtomicU64,
}

impl HistoryStats {
    /// Rows written to `table`.
    pub fn rows(&self, table: Table) -> u64 {
        let i = Table::ALL.iter().position(|t| *t == table).unwrap_or(0);
        self.rows_written[i].load(Ordering::Relaxed)
    }
}

/// The sender side of the history thread: give it to the sampler's `on_sample` hook.
#[derive(Clone)]
pub struct HistorySender {
    tx: SyncSender<Arc<Snapshot>>,
    stats: Arc<HistoryStats>,
}

impl HistorySender {
    /// Hand a snapshot to the history thread without blocking; a full channel drops it and
    /// counts it in [`HistoryStats::dropped_samples`].
    pub fn offer(&self, snapshot: &Arc<Snapshot>) {
        match self.tx.try_send(snapshot.clone()) {
            Ok(()) | Err(TrySendError::Disconnected(_)) => {}
            Err(TrySendError::Full(_)) => {
                self.stats.dropped_samples.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// How the history thread's first attempt to open its folder went.
#[derive(Debug)]
pub enum FirstOpen {
    /// Writing into this node folder.
    Opened(PathBuf),
    /// It failed (logged, counted, and retried with backoff, except that the caller may prefer to
    /// stop, e.g. on [`HistoryError::Locked`]).
    Failed(HistoryError),
    /// The first snapshot had no inventory (no node name yet): the folder is opened later.
    NoInventory,
}

/// The running history thread.
pub struct HistoryThread {
    handle: JoinHandle<()>,
    first: Receiver<FirstOpen>,
}

impl HistoryThread {
    /// Waits at most `timeout` for the outcome of the first attempt to open the node folder,
    /// made at the first snapshot; `None` when none came in time.
    pub fn first_open(&self, timeout: Duration) -> Option<FirstOpen> {
        self.first.recv_timeout(timeout).ok()
    }

    /// Waits for the thread to end: after every [`HistorySender`] is dropped it writes the
    /// interval in progress and ends.
    pub fn join(self) {
        let _ = self.handle.join();
    }

    /// [`join`](Self::join) for at most `timeout`; whether the thread ended.
    pub fn join_within(self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while !self.handle.is_finished() {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.handle.join();
        true
    }
}

/// Start the history thread writing under `root/<node>` (the node name comes from the first
/// inventory; the folder is opened at the first snapshot that has one). Errors are counted in
/// `stats` and logged; the thread keeps going, retrying to open with backoff (1 s to 60 s).
pub fn spawn(
    root: PathBuf,
    options: WriterOptions,
    stats: Arc<HistoryStats>,
    capacity: usize,
) -> std::io::Result<(HistorySender, HistoryThread)> {
    let (tx, rx) = std::sync::mpsc::sync_channel(capacity.max(1));
    let (first_tx, first_rx) = std::sync::mpsc::sync_channel(1);
    let st = stats.clone();
    let handle = std::thread::Builder::new()
        .name("tessera-history".into())
        .spawn(move || history_loop(root, options, st, rx, first_tx))?;
    Ok((
        HistorySender { tx, stats },
        HistoryThread {
            handle,
            first: first_rx,
        },
    ))
}

/// At most one line per this period reports lost (or duplicate) rows; every batch is in one.
pub const REPORT_EVERY: Duration = Duration::from_secs(10);
const RETRY_FIRST: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(60);

/// What a [`RowReport`] counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowEvent {
    /// Rows that did not reach the disk.
    Lost,
    /// Rows dropped because their table already held their interval.
    Duplicate,
}

/// Rate-limited reporting of batches of rows lost or dropped: every batch is counted into
/// exactly one line; the first line comes at once, then at most one per `every`, and
/// [`finish`](Self::finish) gives what is left.
#[derive(Debug)]
pub struct RowReport {
    event: RowEvent,
    every: Duration,
    last_line: Option<Instant>,
    since: Option<Instant>,
    batches: u64,
    rows: [u64; 3],
    total_batches: u64,
    reason: String,
}

impl RowReport {
    pub fn new(event: RowEvent, every: Duration) -> RowReport {
        RowReport {
            event,
            every,
            last_line: None,
            since: None,
            batches: 0,
            rows: [0; 3],
            total_batches: 0,
            reason: String::new(),
        }
    }

    /// Count one batch (`rows` by table) at `now`; the line to log, when one is due.
    pub fn add(&mut self, now: Instant, rows: [u64; 3], reason: String) -> Option<String> {
        self.batches += 1;
        self.total_batches += 1;
        for (a, b) in self.rows.iter_mut().zip(rows) {
            *a += b;
        }
        self.reason = reason;
        self.since.get_or_insert(now);
        self.due(now)
    }

    /// The line to log at `now`, when batches wait and the period is over.
    pub fn due(&mut self, now: Instant) -> Option<String> {
        let ready = self
            .last_line
            .is_none_or(|t| now.saturating_duration_since(t) >= self.every);
        (self.batches > 0 && ready).then(|| self.line(now))
    }

    /// The line for the batches not reported yet, if any.
    pub fn finish(&mut self, now: Instant) -> Option<String> {
        (self.batches > 0).then(|| self.line(now))
    }

    fn line(&mut self, now: Instant) -> String {
        let secs = self
            .since
            .map_or(0.0, |s| now.saturating_duration_since(s).as_secs_f64());
        let [g, m, p] = self.rows;
        let text = match self.event {
            RowEvent::Lost => format!(
                "lost {} batch(es) of rows (gpu {g}, mig {m}, process {p} rows) in the last {secs:.1} s: {}; {} batch(es) lost since start",
                self.batches, self.reason, self.total_batches
            ),
            RowEvent::Duplicate => format!(
                "dropped {} row(s) of {} batch(es) (gpu {g}, mig {m}, process {p} rows) in the last {secs:.1} s whose intervals the folder already holds ({}); {} batch(es) so far",
                g + m + p,
                self.batches,
                self.reason,
                self.total_batches
            ),
        };
        self.batches = 0;
        self.rows = [0; 3];
        self.since = None;
        self.last_line = Some(now);
        text
    }
}

fn counts(rows: &Rows) -> [u64; 3] {
    let mut c = [0; 3];
    for (i, t) in Table::ALL.iter().enumerate() {
        c[i] = rows.len(*t) as u64;
    }
    c
}

struct Loop {
    stats: Arc<HistoryStats>,
    lost: RowReport,
    duplicates: RowReport,
    dir: Option<PathBuf>,
}

impl Loop {
    fn error(&self, e: &HistoryError) {
        let n = self.stats.write_errors.fetch_add(1, Ordering::Relaxed) + 1;
        if n <= 10 || n.is_power_of_two() {
            log::warn!("history: {e} ({n} error(s) so far)");
        }
    }

    fn log(&self, line: Option<String>) {
        if let Some(l) = line {
            let dir = self
                .dir
                .as_ref()
                .map_or(String::new(), |d| format!(" {}", d.display()));
            log::warn!("history{dir}: {l}");
        }
    }

    fn lost(&mut self, rows: [u64; 3], reason: String) {
        self.stats.lost_batches.fetch_add(1, Ordering::Relaxed);
        self.stats
            .lost_rows
            .fetch_add(rows.iter().sum(), Ordering::Relaxed);
        let line = self.lost.add(Instant::now(), rows, reason);
        self.log(line);
    }

    fn account(&mut self, report: WriteReport) {
        for (i, n) in report.written.iter().enumerate() {
            self.stats.rows_written[i].fetch_add(*n, Ordering::Relaxed);
        }
        for e in &report.errors {
            self.error(e);
        }
        if report.lost_rows() > 0 {
            let reason = report
                .errors
                .first()
                .map_or_else(|| "unknown error".to_string(), |e| e.to_string());
            self.lost(report.lost, reason);
        }
        if report.duplicate_rows() > 0 {
            self.stats
                .duplicate_rows
                .fetch_add(report.duplicate_rows(), Ordering::Relaxed);
            let line = self.duplicates.add(
                Instant::now(),
                report.duplicates,
                "a clock that went back or restarted".into(),
            );
            self.log(line);
        }
        let now = Instant::now();
        let (a, b) = (self.lost.due(now), self.duplicates.due(now));
        self.log(a);
        self.log(b);
    }
}

fn history_loop(
    root: PathBuf,
    options: WriterOptions,
    stats: Arc<HistoryStats>,
    rx: Receiver<Arc<Snapshot>>,
    first: SyncSender<FirstOpen>,
) {
    let mut first = Some(first);
    let mut writer: Option<HistoryWriter> = None;
    let mut aggregator: Option<Aggregator> = None;
    let mut retry_at = Instant::now();
    let mut backoff = RETRY_FIRST;
    let mut last_error = String::new();
    let mut st = Loop {
        stats,
        lost: RowReport::new(RowEvent::Lost, REPORT_EVERY),
        duplicates: RowReport::new(RowEvent::Duplicate, REPORT_EVERY),
        dir: None,
    };
    while let Ok(snap) = rx.recv() {
        let (Some(inv), Some(sample)) = (&snap.inventory, &snap.sample) else {
            if let Some(tx) = first.take() {
                let _ = tx.send(FirstOpen::NoInventory);
            }
            continue;
        };
        st.dir.get_or_insert_with(|| root.join(&inv.node));
        if writer.is_none() && Instant::now() >= retry_at {
            match HistoryWriter::open(&root, &inv.node, options.clone(), sample.timestamp_ms) {
                Ok(w) => {
                    if let Some(tx) = first.take() {
                        let _ = tx.send(FirstOpen::Opened(w.dir().to_path_buf()));
                    }
                    backoff = RETRY_FIRST;
                    writer = Some(w);
                }
                Err(e) => {
                    st.error(&e);
                    last_error = e.to_string();
                    retry_at = Instant::now() + backoff;
                    backoff = (backoff * 2).min(RETRY_MAX);
                    if let Some(tx) = first.take() {
                        let _ = tx.send(FirstOpen::Failed(e));
                    }
                }
            }
        }
        let agg = aggregator.get_or_insert_with(|| Aggregator::new(&inv.node, options.interval_ms));
        let Some(rows) = agg.push_held(inv, sample, &snap.attribution, &snap.allocation) else {
            continue;
        };
        match writer.as_mut() {
            Some(w) => {
                let report = w.write(&rows);
                st.account(report);
            }
            None => {
                // Not open: these rows are lost; count them as a failed write.
                st.stats.write_errors.fetch_add(1, Ordering::Relaxed);
                st.lost(
                    counts(&rows),
                    format!("the history folder is not open ({last_error})"),
                );
            }
        }
    }
    // Channel closed: write the interval in progress and leave the open segments for the next run.
    if let Some(agg) = aggregator.as_mut()
        && let Some(rows) = agg.flush()
    {
        match writer.as_mut() {
            Some(w) => {
                let report = w.write(&rows);
                st.account(report);
            }
            None => st.lost(
                counts(&rows),
                format!("the history folder is not open ({last_error})"),
            ),
        }
    }
    let now = Instant::now();
    let (a, b) = (st.lost.finish(now), st.duplicates.finish(now));
    st.log(a);
    st.log(b);
}

#[cfg(test)]
mod tests {
    use super::{RowEvent, RowReport};
    use std::time::{Duration, Instant};

    #[test]
    fn every_batch_is_in_exactly_one_line_at_most_one_line_per_period() {
        let mut r = RowReport::new(RowEvent::Lost, Duration::from_secs(10));
        let t0 = Instant::now();
        let mut lines = Vec::new();
        // 1000 batches over 25 s, 4 GPU rows each.
        for i in 0..1000u64 {
            let now = t0 + Duration::from_millis(i * 25);
            lines.extend(r.add(now, [4, 0, 1], "disk full".into()));
        }
        lines.extend(r.finish(t0 + Duration::from_secs(26)));
        assert!(r.finish(t0 + Duration::from_secs(27)).is_none());
        // At once, at 10 s, at 20 s, and the rest at the end.
        assert_eq!(lines.len(), 4, "{lines:#?}");
        let batches: u64 = lines
            .iter()
            .map(|l| l.split(' ').nth(1).unwrap().parse::<u64>().unwrap())
            .sum();
        assert_eq!(batches, 1000);
        assert!(lines[0].starts_with("lost 1 batch(es) of rows (gpu 4, mig 0, process 1 rows)"));
        assert!(
            lines[1].contains("(gpu 1600, mig 0, process 400 rows)"),
            "{}",
            lines[1]
        );
        assert!(
            lines[3].ends_with("1000 batch(es) lost since start"),
            "{}",
            lines[3]
        );
        assert!(lines.iter().all(|l| l.contains("disk full")));
    }
}
