//! The off-peak detector's partial: free GPUs per UTC hour and GPU model in one partition, and
//! the GPUs observed per model ([`FreeGpus`]: small, hours × models), added up across
//! partitions with [`FreeGpus::merge`].
//!
//! This module does not build the profile (that is `profile`) or judge windows.

use std::collections::BTreeMap;

use polars::prelude::*;

use super::{HOUR_MS, OffpeakParams, UNKNOWN_MODEL};
use crate::advisor::AdvisorError;
use crate::frames::Frames;
use crate::frames::columns::{self, ts_ms};

/// How much of one UTC hour the data covers: the GPUs with rows in it and the time their rows
/// cover inside the hour (each GPU's at most the hour).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HourCover {
    pub gpus: u32,
    pub covered_ms: i64,
}

impl HourCover {
    /// Whether the hour is an observation: its rows cover at least half of the hour for the GPUs
    /// seen in it (an hour at the edge of the range or in a fleet-wide gap is not).
    pub fn observed(&self) -> bool {
        self.gpus > 0 && self.covered_ms.saturating_mul(2) >= i64::from(self.gpus) * HOUR_MS
    }
}

/// Free GPUs per UTC hour and GPU model, the coverage of each hour, and the GPUs observed per
/// model: one partition's partial, or the fleet's once merged (partitions hold disjoint GPUs,
/// so counts add up).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FreeGpus {
    /// Hour index since the epoch (UTC) → model → free GPUs of that model. Every hour in which
    /// some GPU has rows is present; models with no free GPU in it may be absent.
    pub per_hour: BTreeMap<i64, BTreeMap<String, u32>>,
    /// Hour index → how much of it the rows cover ([`HourCover::observed`]).
    pub cover: BTreeMap<i64, HourCover>,
    /// Model → GPUs observed.
    pub gpus: BTreeMap<String, usize>,
    /// GPUs without a memory value in any row: judged free on activity alone.
    pub gpus_without_memory: usize,
    /// GPUs without memory, activity (SM activity or busy ratio) and holders in any row: never
    /// judged free.
    pub gpus_without_signal: usize,
    /// GPUs with holders (the scheduler's allocation) but neither memory nor activity in any row
    /// (occupancy-only data): free exactly when allocated to nobody.
    pub gpus_by_allocation_only: usize,
}

impl FreeGpus {
    /// A partial over whole hours, every hour fully covered by `gpus` GPUs of one model (tests
    /// and hand-made profiles).
    pub fn fully_observed(
        per_hour: BTreeMap<i64, BTreeMap<String, u32>>,
        gpus: BTreeMap<String, usize>,
    ) -> FreeGpus {
        let n: usize = gpus.values().sum();
        let cover = per_hour
            .keys()
            .map(|&h| {
                (
                    h,
                    HourCover {
                        gpus: n as u32,
                        covered_ms: n as i64 * HOUR_MS,
                    },
                )
            })
            .collect();
        FreeGpus {
            per_hour,
            cover,
            gpus,
            ..FreeGpus::default()
        }
    }

    /// Adds another partition's counts.
    pub fn merge(&mut self, other: FreeGpus) {
        for (h, models) in other.per_hour {
            let e = self.per_hour.entry(h).or_default();
            for (m, f) in models {
                *e.entry(m).or_default() += f;
            }
        }
        for (h, c) in other.cover {
            let e = self.cover.entry(h).or_default();
            e.gpus += c.gpus;
            e.covered_ms += c.covered_ms;
        }
        for (m, g) in other.gpus {
            *self.gpus.entry(m).or_default() += g;
        }
        self.gpus_without_memory += other.gpus_without_memory;
        self.gpus_without_signal += other.gpus_without_signal;
        self.gpus_by_allocation_only += other.gpus_by_allocation_only;
    }

    /// GPUs observed, all models.
    pub fn gpus_observed(&self) -> usize {
        self.gpus.values().sum()
    }

    /// Whether hour `h` is an observation ([`HourCover::observed`]).
    pub fn observed(&self, h: i64) -> bool {
        self.cover.get(&h).is_some_and(HourCover::observed)
    }

    /// Free GPUs per observed hour, all models.
    pub fn totals(&self) -> BTreeMap<i64, u32> {
        self.per_hour
            .iter()
            .filter(|(h, _)| self.observed(**h))
            .map(|(&h, m)| (h, m.values().sum()))
            .collect()
    }
}

/// Whether a row's GPU is free: memory (when known) under the free bound, activity (when known)
/// at most the bound, no holder (when known), and at least one of the three known.
fn free_rule(mem: &Expr, act: &Expr, held: &Expr, p: &OffpeakParams) -> Expr {
    (mem.clone()
        .is_null()
        .or(mem.clone().lt(lit(p.free_memory_bytes))))
    .and(
        act.clone()
            .is_null()
            .or(act.clone().lt_eq(lit(p.max_activity))),
    )
    .and(held.clone().is_null().or(held.clone().eq(lit(0i64))))
    .and(
        mem.clone()
            .is_not_null()
            .or(act.clone().is_not_null())
            .or(held.clone().is_not_null()),
    )
    .fill_null(lit(false))
}

/// Per model, from the per GPU and hour rows: its GPUs, and those without memory, without any
/// signal, and known free by allocation only.
fn gpus_per_model(per_gpu: &DataFrame) -> Result<DataFrame, AdvisorError> {
    Ok(per_gpu
        .clone()
        .lazy()
        .group_by([col("node"), col("uuid")])
        .agg([
            col("model").first(),
            col("has_mem").max().alias("has_mem"),
            col("has_act").max().alias("has_act"),
            col("has_held").max().alias("has_held"),
        ])
        .group_by([col("model")])
        .agg([
            len().cast(DataType::Int64).alias("gpus"),
            col("has_mem")
                .eq(lit(0))
                .cast(DataType::Int64)
                .sum()
                .alias("no_mem"),
            col("has_mem")
                .eq(lit(0))
                .and(col("has_act").eq(lit(0)))
                .and(col("has_held").eq(lit(0)))
                .cast(DataType::Int64)
                .sum()
                .alias("no_signal"),
            col("has_mem")
                .eq(lit(0))
                .and(col("has_act").eq(lit(0)))
                .and(col("has_held").eq(lit(1)))
                .cast(DataType::Int64)
                .sum()
                .alias("alloc_only"),
        ])
        .collect()?)
}

/// Reads [`gpus_per_model`]'s counts into `out`.
fn count_gpus(gpus_df: &DataFrame, out: &mut FreeGpus) -> Result<(), AdvisorError> {
    let model = columns::strs(gpus_df, "model")?;
    let count = columns::i64s(gpus_df, "gpus")?;
    let no_mem = columns::i64s(gpus_df, "no_mem")?;
    let no_signal = columns::i64s(gpus_df, "no_signal")?;
    let alloc_only = columns::i64s(gpus_df, "alloc_only")?;
    for i in 0..gpus_df.height() {
        if let (Some(m), Some(g)) = (model.get(i), count.get(i)) {
            out.gpus.insert(m.to_string(), g.max(0) as usize);
        }
        out.gpus_without_memory += no_mem.get(i).unwrap_or(0).max(0) as usize;
        out.gpus_without_signal += no_signal.get(i).unwrap_or(0).max(0) as usize;
        out.gpus_by_allocation_only += alloc_only.get(i).unwrap_or(0).max(0) as usize;
    }
    Ok(())
}

/// Reads the free GPUs per hour and model, and each hour's GPUs and time covered, into `out`.
fn free_per_hour(df: &DataFrame, out: &mut FreeGpus) -> Result<(), AdvisorError> {
    let hour = columns::i64s(df, "hour")?;
    let model = columns::strs(df, "model")?;
    let freec = columns::i64s(df, "free")?;
    let gpus = columns::i64s(df, "gpus")?;
    let covered = columns::i64s(df, "covered")?;
    for i in 0..df.height() {
        let Some(h) = hour.get(i) else { continue };
        let c = out.cover.entry(h).or_default();
        c.gpus += gpus.get(i).unwrap_or(0).max(0) as u32;
        c.covered_ms += covered.get(i).unwrap_or(0).max(0);
        let e = out.per_hour.entry(h).or_default();
        if let (Some(m), Some(f)) = (model.get(i), freec.get(i))
            && f > 0
        {
            e.insert(m.to_string(), f as u32);
        }
    }
    Ok(())
}

/// Free GPUs per UTC hour and model, the coverage of each hour, and the GPUs seen per model.
///
/// A row is free when no pod or job holds the GPU (`holders` 0 or unknown: held is never free,
/// whatever its use, since a scheduler cannot place work there), it holds less than
/// `free_memory_bytes` and shows activity ≤ `max_activity` (SM activity, else busy ratio, on the
/// interval max); a signal the row lacks is not held against it, but a row with neither
/// memory, activity nor holders is not free (nothing says it is). A GPU is free in an hour when all its rows there are and they cover at least half of
/// it. A row covers the part of its interval `(ts − interval_ms, ts]` inside the hour it ends in.
pub fn free_gpus_per_hour(frames: &Frames, p: &OffpeakParams) -> Result<FreeGpus, AdvisorError> {
    let act = when(col("sm_active_max").is_not_null())
        .then(col("sm_active_max"))
        .otherwise(col("busy_max"));
    let mem = col("memory_used_max_bytes").cast(DataType::Float64);
    let held = col("holders").cast(DataType::Int64);
    let free = free_rule(&mem, &act, &held, p);
    // ts > 0, so truncation is floor.
    let hour =
        ((ts_ms() - lit(1i64)).cast(DataType::Float64) / lit(HOUR_MS as f64)).cast(DataType::Int64);
    // The part of the row's interval inside the hour it ends in.
    let covered = when(
        col("interval_ms")
            .cast(DataType::Int64)
            .lt(ts_ms() - col("hour") * lit(HOUR_MS)),
    )
    .then(col("interval_ms").cast(DataType::Int64))
    .otherwise(ts_ms() - col("hour") * lit(HOUR_MS));
    // Frames made by hand (tests, older callers) may lack the holders: unknown.
    let mut gpu = frames.gpu.clone();
    if gpu.collect_schema()?.get("holders").is_none() {
        gpu = gpu.with_column(lit(NULL).cast(DataType::UInt32).alias("holders"));
    }
    // One row per GPU and hour: small (GPUs × hours), so it is collected once.
    let per_gpu = gpu
        .select([
            col("node"),
            col("uuid"),
            col("model").cast(DataType::String),
            col("ts"),
            hour.alias("hour"),
            col("interval_ms").cast(DataType::Int64),
            free.cast(DataType::Int32).alias("free"),
            mem.is_not_null().cast(DataType::Int32).alias("has_mem"),
            act.is_not_null().cast(DataType::Int32).alias("has_act"),
            held.is_not_null().cast(DataType::Int32).alias("has_held"),
        ])
        .with_column(covered.alias("covered"))
        .group_by([col("node"), col("uuid"), col("hour")])
        .agg([
            col("free").min().alias("all_free"),
            col("covered").sum().alias("covered"),
            col("has_mem").max().alias("has_mem"),
            col("has_act").max().alias("has_act"),
            col("has_held").max().alias("has_held"),
            col("model").drop_nulls().first().alias("model"),
        ])
        .with_column(
            when(col("covered").gt(lit(HOUR_MS)))
                .then(lit(HOUR_MS))
                .otherwise(col("covered"))
                .alias("covered"),
        )
        // A GPU's model: its first known one, in every hour.
        .with_column(
            col("model")
                .drop_nulls()
                .first()
                .over([col("node"), col("uuid")])?
                .fill_null(lit(UNKNOWN_MODEL))
                .alias("model"),
        )
        .collect()?;
    let gpus_df = gpus_per_model(&per_gpu)?;
    let df = per_gpu
        .lazy()
        .with_column(
            col("all_free")
                .eq(lit(1))
                .and(col("covered").gt_eq(lit(HOUR_MS / 2)))
                .cast(DataType::Int64)
                .alias("is_free"),
        )
        .group_by([col("hour"), col("model")])
        .agg([
            col("is_free").sum().alias("free"),
            len().cast(DataType::Int64).alias("gpus"),
            col("covered").sum().alias("covered"),
        ])
        .collect()?;
    let mut out = FreeGpus::default();
    count_gpus(&gpus_df, &mut out)?;
    free_per_hour(&df, &mut out)?;
    Ok(out)
}
