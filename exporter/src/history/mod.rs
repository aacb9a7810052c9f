//! The history: interval rows of GPU, MIG and process activity written to disk by the exporter
//! and read by the analyzer, in the versioned format of `docs/history-format.md`.
//!
//! - [`schema`]: the tables and columns (the single source of truth), typed-row ↔ arrow glue.
//! - [`aggregate`]: 1-second samples → interval rows (pure).
//! - [`writer`]: one node folder: manifest, open JSONL segments, hourly Parquet, recovery, retention.
//! - [`compact`]: merges the hourly files of a finished UTC day into one day file.
//! - [`reader`]: the strict reader (arrow/parquet, never polars).
//! - [`simulate`]: a whole scenario's history on the virtual clock (`tessera simulate`).
//! - [`spawn`]: the exporter's history thread, fed off the sampler's hot path by a bounded channel.
//!
//! This module never samples a GPU and never links polars.

pub mod aggregate;
pub mod compact;
pub mod reader;
pub mod schema;
pub mod simulate;
pub mod writer;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use aggregate::{Aggregator, GpuRow, MigRow, ProcessRow, Rows};
pub use reader::{NodeHistory, read_node_dir};
pub use schema::{HISTORY_VERSION, Table};
pub use writer::{HistoryError, HistoryWriter, WriterMode, WriterOptions};

use crate::sampler::Snapshot;

/// Default `--history.dir` (used when it can be written).
pub const DEFAULT_DIR: &str = "/var/lib/tessera/history";

/// Counters of the history thread, read by the self-metrics.
#[derive(Debug, Default)]
pub struct HistoryStats {
    /// Rows written, by table (in [`Table::ALL`] order).
    pub rows_written: [AtomicU64; 3],
    /// Failed writes (disk full, read-only folder, …).
    pub write_errors: AtomicU64,
    /// Samples dropped because the history thread was behind (full channel).
    pub dropped_samples: AtomicU64,
}

impl HistoryStats {
    /// Rows written to `table`.
    pub fn rows(&self, table: Table) -> u64 {
        let i = Table::ALL.iter().position(|t| *t == table).unwrap_or(0);
        self.rows_written[i].load(Ordering::Relaxed)
    }

    fn add_rows(&self, rows: &Rows) {
        for (i, t) in Table::ALL.iter().enumerate() {
            self.rows_written[i].fetch_add(rows.len(*t) as u64, Ordering::Relaxed);
        }
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

/// Start the history thread writing under `root/<node>` (the node name comes from the first
/// inventory). Errors are counted in `stats` and logged; the thread keeps going.
pub fn spawn(
    root: PathBuf,
    options: WriterOptions,
    stats: Arc<HistoryStats>,
    capacity: usize,
) -> std::io::Result<(HistorySender, JoinHandle<()>)> {
    let (tx, rx) = std::sync::mpsc::sync_channel(capacity.max(1));
    let st = stats.clone();
    let thread = std::thread::Builder::new()
        .name("tessera-history".into())
        .spawn(move || history_loop(root, options, st, rx))?;
    Ok((HistorySender { tx, stats }, thread))
}

fn history_loop(
    root: PathBuf,
    options: WriterOptions,
    stats: Arc<HistoryStats>,
    rx: Receiver<Arc<Snapshot>>,
) {
    let mut writer: Option<HistoryWriter> = None;
    let mut aggregator: Option<Aggregator> = None;
    let mut retry_at = Instant::now();
    let error = |e: &HistoryError| {
        let n = stats.write_errors.fetch_add(1, Ordering::Relaxed) + 1;
        if n <= 10 || n.is_power_of_two() {
            log::warn!("history: {e} ({n} error(s) so far)");
        }
    };
    while let Ok(snap) = rx.recv() {
        let (Some(inv), Some(sample)) = (&snap.inventory, &snap.sample) else {
            continue;
        };
        let agg = aggregator.get_or_insert_with(|| Aggregator::new(&inv.node, options.interval_ms));
        let Some(rows) = agg.push(inv, sample, &snap.attribution) else {
            continue;
        };
        if writer.is_none() && Instant::now() >= retry_at {
            match HistoryWriter::open(&root, &inv.node, options.clone(), sample.timestamp_ms) {
                Ok(w) => writer = Some(w),
                Err(e) => {
                    error(&e);
                    retry_at = Instant::now() + Duration::from_secs(60);
                }
            }
        }
        match writer.as_mut() {
            Some(w) => match w.write(&rows) {
                Ok(()) => stats.add_rows(&rows),
                Err(e) => error(&e),
            },
            None => {
                // Not open: these rows are lost; count them as a failed write.
                stats.write_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    // Channel closed: write the interval in progress and leave the open segments for the next run.
    if let (Some(agg), Some(w)) = (aggregator.as_mut(), writer.as_mut())
        && let Some(rows) = agg.flush()
    {
        match w.write(&rows) {
            Ok(()) => stats.add_rows(&rows),
            Err(e) => error(&e),
        }
    }
}

/// Parse a size such as `1GiB`, `512MiB`, `10MB`, `4096` (bytes) for `--history.max-bytes`.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("invalid size {s:?}: expected a number and a unit, e.g. 512MiB"))?;
    let mult: f64 = match unit.trim() {
        "" | "B" => 1.0,
        "KB" | "kB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "TB" => 1e12,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        "TiB" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        u => {
            return Err(format!(
                "invalid size {s:?}: unknown unit {u:?} (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)"
            ));
        }
    };
    let bytes = value * mult;
    if !(bytes >= 1.0 && bytes < u64::MAX as f64) {
        return Err(format!("invalid size {s:?}: must be at least 1 byte"));
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::parse_bytes;

    #[test]
    fn sizes() {
        assert_eq!(parse_bytes("1GiB"), Ok(1 << 30));
        assert_eq!(parse_bytes("512MiB"), Ok(512 << 20));
        assert_eq!(parse_bytes("10MB"), Ok(10_000_000));
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert!(parse_bytes("1XB").is_err());
        assert!(parse_bytes("0").is_err());
        assert!(parse_bytes("GiB").is_err());
    }
}
