//! History of a whole simulated fleet: every node of a scenario sampled on the stepped virtual
//! clock from the scenario's start, through the same [`Aggregator`] and [`HistoryWriter`] as the
//! exporter (in [`WriterMode::Direct`]: no JSONL, Parquet per hour). Backs `tessera simulate`.
//!
//! A node folder that already holds history after the scenario's start is refused (its rows
//! would be duplicates), and so is one another writer holds (the lock, [`crate::history::lock`]). Nodes
//! run in parallel (one thread per node, at most the available cores). This module does not
//! write the ground truth (the analyzer does) and never touches a GPU.

use std::path::Path;
use std::sync::Arc;

use crate::device::GpuBackend;
use crate::history::files::format_ms;
use crate::history::{Aggregator, HistoryError, HistoryWriter, Table, WriterMode, WriterOptions};
use crate::sim::{Scenario, SimBackend, SimClock};

/// What a simulation wrote.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SimulateSummary {
    pub nodes: usize,
    pub gpus: usize,
    pub samples: u64,
    /// Rows by table, in [`Table::ALL`] order.
    pub rows: [u64; 3],
}

/// Simulate `days` of every node of `scenario` into `out/<node>/`, sampling every
/// `sample_ms` (1000 for the exporter's default) into rows of `interval_ms`.
pub fn simulate(
    scenario: &Scenario,
    days: u32,
    out: &Path,
    sample_ms: i64,
    interval_ms: i64,
) -> Result<SimulateSummary, HistoryError> {
    simulate_for(
        scenario,
        i64::from(days) * 86_400_000,
        out,
        sample_ms,
        interval_ms,
    )
}

/// [`simulate`], calling `progress(share)` (0–1 of the node-time simulated, from a worker thread)
/// as the simulation goes (each node's simulated hour).
pub fn simulate_with(
    scenario: &Scenario,
    days: u32,
    out: &Path,
    sample_ms: i64,
    interval_ms: i64,
    progress: &(dyn Fn(f64) + Sync),
) -> Result<SimulateSummary, HistoryError> {
    simulate_for_with(
        scenario,
        i64::from(days) * 86_400_000,
        out,
        sample_ms,
        interval_ms,
        progress,
    )
}

/// Like [`simulate`], for `duration_ms` from the scenario's start.
pub fn simulate_for(
    scenario: &Scenario,
    duration_ms: i64,
    out: &Path,
    sample_ms: i64,
    interval_ms: i64,
) -> Result<SimulateSummary, HistoryError> {
    simulate_for_with(scenario, duration_ms, out, sample_ms, interval_ms, &|_| {})
}

/// [`simulate_for`] with [`simulate_with`]'s progress.
pub fn simulate_for_with(
    scenario: &Scenario,
    duration_ms: i64,
    out: &Path,
    sample_ms: i64,
    interval_ms: i64,
    progress: &(dyn Fn(f64) + Sync),
) -> Result<SimulateSummary, HistoryError> {
    let start = scenario.start.timestamp_millis();
    let end = start + duration_ms.max(0);
    let sample_ms = sample_ms.max(1);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let names: Vec<String> = scenario.nodes.iter().map(|n| n.name.clone()).collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results = std::sync::Mutex::new(Vec::new());
    // Node-hours simulated, of `total` (each node's simulated hour reports).
    let hours_done = std::sync::atomic::AtomicU64::new(0);
    let total = (names.len() as f64 * (end - start) as f64 / 3_600_000.0).max(1.0);
    let hour_done = || {
        let n = hours_done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        progress((n as f64 / total).min(1.0));
    };
    std::thread::scope(|scope| {
        for _ in 0..threads.min(names.len()).max(1) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(name) = names.get(i) else { break };
                    let r = simulate_node(
                        scenario,
                        name,
                        out,
                        (start, end),
                        (sample_ms, interval_ms),
                        &hour_done,
                    );
                    results.lock().unwrap_or_else(|p| p.into_inner()).push(r);
                }
            });
        }
    });
    let mut total = SimulateSummary::default();
    for r in results.into_inner().unwrap_or_else(|p| p.into_inner()) {
        let s = r?;
        total.nodes += s.nodes;
        total.gpus += s.gpus;
        total.samples += s.samples;
        for i in 0..3 {
            total.rows[i] += s.rows[i];
        }
    }
    Ok(total)
}

fn simulate_node(
    scenario: &Scenario,
    name: &str,
    out: &Path,
    (start, end): (i64, i64),
    (sample_ms, interval_ms): (i64, i64),
    hour_done: &(dyn Fn() + Sync),
) -> Result<SimulateSummary, HistoryError> {
    let invalid = |message: String| HistoryError::Invalid {
        path: out.to_path_buf(),
        message,
    };
    let mut backend = SimBackend::new(
        scenario,
        Some(name),
        // The first sample describes the scenario's first second: it is taken at its end
        // (rows hold (end − interval, end]).
        SimClock::Stepped {
            next_ms: start + sample_ms,
            step_ms: sample_ms,
        },
    )
    .map_err(|e| invalid(e.to_string()))?;
    let mut inventory = Arc::new(backend.inventory().map_err(|e| invalid(e.to_string()))?);
    let mut epoch = backend.node().layout_epoch();
    let attribution = backend.node().attribution();
    let options = WriterOptions {
        interval_ms,
        retention_ms: (end - start) + 86_400_000,
        max_bytes: u64::MAX,
        mode: WriterMode::Direct,
    };
    let mut writer = HistoryWriter::open(out, &inventory.node, options, start)?;
    // A second run over the same intervals would write nothing (its rows are duplicates): say so.
    if let Some(t) = writer.newest_ts().filter(|t| *t > start) {
        return Err(HistoryError::Invalid {
            path: writer.dir().to_path_buf(),
            message: format!(
                "already holds history up to {}, and a simulation from {} would write those \
                 intervals again: simulate into an empty folder",
                format_ms(t),
                format_ms(start)
            ),
        });
    }
    let mut agg = Aggregator::new(&inventory.node, interval_ms);
    let mut summary = SimulateSummary {
        nodes: 1,
        gpus: inventory.gpus.len(),
        ..SimulateSummary::default()
    };
    let mut t = start;
    let mut next_hour = start + 3_600_000;
    while t < end {
        t += sample_ms;
        while t >= next_hour && next_hour <= end {
            hour_done();
            next_hour += 3_600_000;
        }
        // A simulated driver-level fault fails the whole sample, as on a real node.
        let Ok(sample) = backend.sample() else {
            continue;
        };
        summary.samples += 1;
        // A scheduled MIG layout change (scenario `mig` windows) reaches the inventory, as the
        // exporter's sampler re-reads it.
        if backend.node().layout_epoch() != epoch {
            epoch = backend.node().layout_epoch();
            inventory = Arc::new(backend.inventory().map_err(|e| invalid(e.to_string()))?);
        }
        let allocation = backend.node().allocation(sample.timestamp_ms);
        if let Some(rows) = agg.push_held(&inventory, &sample, &attribution, &allocation) {
            for (i, table) in Table::ALL.iter().enumerate() {
                summary.rows[i] += rows.len(*table) as u64;
            }
            writer.write(&rows).into_result()?;
        }
    }
    if let Some(rows) = agg.flush() {
        for (i, table) in Table::ALL.iter().enumerate() {
            summary.rows[i] += rows.len(*table) as u64;
        }
        writer.write(&rows).into_result()?;
    }
    writer.finish()?;
    Ok(summary)
}
