//! One read per node partition for the whole weekly report: the advisor's detectors, the
//! report's tallies ([`PartTally`]), the MIG planner's demand ([`demand::extract_part`]) and the
//! change scan ([`changes::scan::part`]) all run on the advisor's worker that holds the partition, from
//! the partition's rows read once into memory (the columns any of them uses, the report range
//! and the period before it). Each would otherwise decode the same Parquet columns again, and
//! run in a phase of its own.
//!
//! The results are those of [`advisor::analyze_parts`], [`super::build_parts`] and
//! [`demand::extract_parts`] over the same partitions, byte for byte: each consumer reads the
//! same rows in the same order, only from memory. This module reads frames and calls those
//! three; it adds no analysis of its own, and it does not plan MIG layouts or render anything.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use polars::prelude::*;

use super::{PartTally, Prices, ReportError};
use crate::advisor::{self, AdvisorError, Analysis, Params};
use crate::changes;
use crate::frames::shared::PartStrs;
use crate::frames::{Frames, Table};
use crate::mig_planner::demand::{self, Demand, DemandParams};

/// Time spent in each step, summed over the workers (`TESSERA_TIMINGS`).
#[derive(Default)]
struct Spent([AtomicU64; 4]);

impl Spent {
    fn add(&self, step: usize, since: std::time::Instant) {
        self.0[step].fetch_add(since.elapsed().as_nanos() as u64, Ordering::Relaxed);
    }

    fn get(&self, step: usize) -> std::time::Duration {
        std::time::Duration::from_nanos(self.0[step].load(Ordering::Relaxed))
    }
}

/// What the pass produced: the analysis, the tallies to [`PartTally::finish`] into the report
/// (with the analysis), and the MIG demand.
pub struct Pass {
    pub analysis: Analysis,
    pub tally: PartTally,
    pub demand: Demand,
    /// The change scan of each partition over the range, in partition order.
    pub scans: Vec<changes::scan::PartScan>,
}

/// The columns of `t` that the detectors, the tallies or the demand read, in a fixed order.
fn columns(t: Table) -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    let mut seen = BTreeSet::new();
    let lists = advisor::USED
        .iter()
        .chain(demand::COLUMNS.iter())
        .filter(|(u, _)| *u == t)
        .map(|(_, c)| *c)
        .chain(match t {
            Table::Gpu => Some(super::tally::GPU_COLUMNS),
            Table::Process => Some(super::tally::PROCESS_COLUMNS),
            Table::Mig => None,
        })
        .chain(
            crate::energy::frames::COLUMNS
                .iter()
                .chain(changes::scan::COLUMNS.iter())
                .filter(|(u, _)| *u == t)
                .map(|(_, c)| *c),
        );
    for list in lists {
        for c in list {
            if seen.insert(*c) {
                out.push(c);
            }
        }
    }
    out
}

/// The rows of every table with `ts` at or after `from`, with the columns any consumer reads,
/// in memory, one chunk per column, unsigned columns as the signed or float type every
/// consumer reads them as.
fn materialize(frames: &Frames, from: i64) -> Result<Frames, PolarsError> {
    let get = |t: Table| -> Result<LazyFrame, PolarsError> {
        let df = frames
            .table(t)
            .clone()
            .filter(col("ts").cast(DataType::Int64).gt_eq(lit(from)))
            .select(columns(t).into_iter().map(col).collect::<Vec<_>>())
            .collect()?;
        // One chunk per column: each consumer reads a numeric column as one array
        // (`columns::f64s`), which copies a column of several chunks; and polars aligns the
        // chunks of columns that differ (rechunking every column) in many operations.
        let mut df = df;
        df.rechunk_mut();
        cast_unsigned(&mut df)?;
        Ok(df.lazy())
    };
    Ok(Frames {
        gpu: get(Table::Gpu)?,
        mig: get(Table::Mig)?,
        process: get(Table::Process)?,
    })
}

/// The rows of every table ending in `(since, until]`, with the columns any consumer of the pass
/// reads, in memory (as [`materialize`] reads a partition; the report's trend reads each week so).
pub(super) fn materialize_within(
    frames: &Frames,
    since: i64,
    until: i64,
) -> Result<Frames, PolarsError> {
    materialize(&frames.within(since, until), since + 1)
}

/// Casts the unsigned columns of `df` to the types every consumer reads them as
/// (`columns::i64s`, `columns::f64s`): `uint32` → `int64`, `uint64` → `float64`. Done once when a
/// partition is read into memory, not once per consumer (a copy of the column each time).
fn cast_unsigned(df: &mut DataFrame) -> Result<(), PolarsError> {
    let unsigned: Vec<(PlSmallStr, DataType)> = df
        .columns()
        .iter()
        .filter_map(|c| match c.dtype() {
            DataType::UInt32 => Some((c.name().clone(), DataType::Int64)),
            DataType::UInt64 => Some((c.name().clone(), DataType::Float64)),
            _ => None,
        })
        .collect();
    for (name, to) in unsigned {
        let cast = df.column(&name)?.cast(&to)?;
        df.with_column(cast)?;
    }
    Ok(())
}

/// The in-memory rows with `ts` at or after `from` (the same frames when every row is).
fn current(frames: &Frames, from: i64) -> Result<Frames, PolarsError> {
    let get = |t: Table| -> Result<LazyFrame, PolarsError> {
        let lf = frames.table(t).clone();
        let first = lf
            .clone()
            .select([col("ts").cast(DataType::Int64).min()])
            .collect()?;
        let first = first.column("ts")?.as_materialized_series().i64()?.get(0);
        Ok(match first {
            Some(f) if f < from => lf
                .filter(col("ts").cast(DataType::Int64).gt_eq(lit(from)))
                .collect()?
                .lazy(),
            _ => lf,
        })
    };
    Ok(Frames {
        gpu: get(Table::Gpu)?,
        mig: get(Table::Mig)?,
        process: get(Table::Process)?,
    })
}

/// Runs the advisor (over rows after `range.0`), the report's tallies (the range `(start, end]`
/// and the period of the same length before it) and the MIG demand (after `range.0`) over the
/// node partitions `parts`, reading each partition once. `params.tz` is the report's time zone;
/// `on_done(n)` is called (from a worker) when `n` partitions are done.
pub fn run(
    parts: &[&Frames],
    range: (i64, i64),
    params: &Params,
    prices: Prices,
    sources: Vec<String>,
    demand_params: &DemandParams,
    on_done: &(dyn Fn(usize) + Sync),
) -> Result<Pass, ReportError> {
    let (start, end) = range;
    let len = (end - start).max(0);
    let tally = PartTally::new(range, params.tz, prices);
    let demands: Mutex<Vec<(usize, demand::PartDemand)>> = Mutex::new(Vec::new());
    let scans: Mutex<Vec<(usize, changes::scan::PartScan)>> = Mutex::new(Vec::new());
    // The first error of a step, kept as it is (the advisor only carries its own errors).
    let failed: Mutex<Option<ReportError>> = Mutex::new(None);
    let spent = Spent::default();
    let step = |i: usize, f: Frames| -> Result<Frames, AdvisorError> {
        // Every partition is added to the tally, or the tally is aborted: no worker waits for
        // a partition that will not come.
        let guard = tally.guard();
        let run = || -> Result<Frames, ReportError> {
            let t = std::time::Instant::now();
            let mem = materialize(&f, start - len + 1)?;
            // The node, uuid, status and team strings interned once for the tallies and the
            // demand.
            let strs = PartStrs::read(&mem)?;
            let ids = strs.ids();
            spent.add(0, t);
            // The rows after the start: the demand's, and the energy split's in the tallies.
            let t = std::time::Instant::now();
            let cur = current(&mem, start + 1)?;
            spent.add(2, t);
            let t = std::time::Instant::now();
            tally.add(i, &mem, Some(&ids), Some(&cur))?;
            spent.add(1, t);
            let t = std::time::Instant::now();
            // The demand reads `cur` whole: a table is `mem`'s (the same rows) when all its rows
            // are after the start.
            let d = demand::extract_part_with(&cur, demand_params, ids.whole(start + 1, i64::MAX))?;
            demands
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((i, d));
            spent.add(2, t);
            let t = std::time::Instant::now();
            // Rows outside the range are skipped, not filtered: `mem`'s columns are the ones
            // whose strings were interned above.
            let scan = changes::scan::part(&mem, start, end)?;
            scans
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((i, scan));
            spent.add(3, t);
            Ok(cur)
        };
        match run() {
            Ok(cur) => {
                guard.disarm();
                Ok(cur)
            }
            Err(e) => {
                let reason = e.to_string();
                failed
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get_or_insert(e);
                Err(AdvisorError::Param {
                    name: "partition",
                    reason,
                })
            }
        }
    };
    let analysis = advisor::analyze_parts_each(
        parts.iter().map(|f| Ok::<_, AdvisorError>((*f).clone())),
        params,
        Some(range),
        sources,
        &[],
        on_done,
        &step,
    );
    // The tallies' time holds the energy split's (one worker's call): printed apart.
    let energy = tally.energy_spent();
    for (i, step) in ["read", "tallies", "MIG demand", "change scan"]
        .into_iter()
        .enumerate()
    {
        let took = if i == 1 {
            spent.get(i).saturating_sub(energy)
        } else {
            spent.get(i)
        };
        crate::timing::report("report pass (summed)", step, took);
    }
    crate::timing::report("report pass (summed)", "energy split", energy);
    let analysis = match analysis {
        Ok(a) => a,
        Err(e) => {
            return Err(failed
                .into_inner()
                .unwrap_or_else(|e| e.into_inner())
                .unwrap_or(ReportError::Advisor(e)));
        }
    };
    let mut extracted = demands.into_inner().unwrap_or_else(|e| e.into_inner());
    extracted.sort_by_key(|(i, _)| *i);
    let extracted = extracted.into_iter().map(|(_, d)| d).collect();
    // The demand reads rows after the start, as the advisor does.
    let cur: Vec<Frames> = parts.iter().map(|f| f.within(start, end)).collect();
    let demand = demand::merge_parts(extracted, &cur.iter().collect::<Vec<_>>(), demand_params)?;
    let mut scans = scans.into_inner().unwrap_or_else(|e| e.into_inner());
    scans.sort_by_key(|(i, _)| *i);
    Ok(Pass {
        analysis,
        tally,
        demand,
        scans: scans.into_iter().map(|(_, s)| s).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsigned_columns_are_cast_to_what_their_readers_read_and_keep_their_values() {
        let mut df = df!(
            "gpu" => [0u32, 1, 7],
            "memory_used_max_bytes" => [Some(5u64), None, Some(1u64 << 40)],
            "interval_ms" => [10_000i64, 10_000, 10_000],
            "node" => ["n1", "n1", "n1"],
        )
        .unwrap();
        cast_unsigned(&mut df).unwrap();
        let g = df.column("gpu").unwrap();
        assert_eq!(g.dtype(), &DataType::Int64);
        assert_eq!(
            g.i64().unwrap().iter().collect::<Vec<_>>(),
            [Some(0), Some(1), Some(7)]
        );
        let m = df.column("memory_used_max_bytes").unwrap();
        assert_eq!(m.dtype(), &DataType::Float64);
        assert_eq!(
            m.f64().unwrap().iter().collect::<Vec<_>>(),
            [Some(5.0), None, Some((1u64 << 40) as f64)]
        );
        assert_eq!(df.column("interval_ms").unwrap().dtype(), &DataType::Int64);
        assert_eq!(df.column("node").unwrap().dtype(), &DataType::String);
        assert_eq!(
            df.get_column_names(),
            ["gpu", "memory_used_max_bytes", "interval_ms", "node"]
        );
    }
}
