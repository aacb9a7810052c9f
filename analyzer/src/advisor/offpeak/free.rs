//! The off-peak detector's partial: free GPUs per UTC hour and GPU model in one partition, and
//! the GPUs observed per model ([`FreeGpus`]: small, hours × models), added up across
//! partitions with [`FreeGpus::merge`].
//!
//! This module does not build the profile (that is `profile`) or judge windows.

use std::collections::BTreeMap;

use polars::prelude::*;

use super::{HOUR_MS, OffpeakParams, UNKNOWN_MODEL};
use crate::advisor::AdvisorError;
use crate::advisor::columns::{self, ts_ms};
use crate::ingest::Frames;

/// Free GPUs per UTC hour and GPU model, and the GPUs observed per model: one partition's
/// partial, or the fleet's once merged (partitions hold disjoint GPUs, so counts add up).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FreeGpus {
    /// Hour index since the epoch (UTC) → model → free GPUs of that model. Every hour in which
    /// some GPU has rows is present; models with no free GPU in it may be absent.
    pub per_hour: BTreeMap<i64, BTreeMap<String, u32>>,
    /// Model → GPUs observed.
    pub gpus: BTreeMap<String, usize>,
}

impl FreeGpus {
    /// Adds another partition's counts.
    pub fn merge(&mut self, other: FreeGpus) {
        for (h, models) in other.per_hour {
            let e = self.per_hour.entry(h).or_default();
            for (m, f) in models {
                *e.entry(m).or_default() += f;
            }
        }
        for (m, g) in other.gpus {
            *self.gpus.entry(m).or_default() += g;
        }
    }

    /// GPUs observed, all models.
    pub fn gpus_observed(&self) -> usize {
        self.gpus.values().sum()
    }

    /// Free GPUs per hour, all models.
    pub fn totals(&self) -> BTreeMap<i64, u32> {
        self.per_hour
            .iter()
            .map(|(&h, m)| (h, m.values().sum()))
            .collect()
    }
}

/// Free GPUs per UTC hour and model, and the GPUs seen per model.
pub fn free_gpus_per_hour(frames: &Frames, p: &OffpeakParams) -> Result<FreeGpus, AdvisorError> {
    let act = when(col("sm_active_max").is_not_null())
        .then(col("sm_active_max"))
        .otherwise(col("busy_max"));
    let free = col("memory_used_max_bytes")
        .cast(DataType::Float64)
        .lt(lit(p.free_memory_bytes))
        .and(act.clone().is_null().or(act.lt_eq(lit(p.max_activity))))
        .fill_null(lit(false));
    // One row per GPU and hour: small (GPUs × hours), so it is collected once.
    let per_gpu = frames
        .gpu
        .clone()
        .select([
            col("node"),
            col("uuid"),
            col("model").cast(DataType::String),
            // ts > 0, so truncation is floor.
            ((ts_ms() - lit(1i64)).cast(DataType::Float64) / lit(HOUR_MS as f64))
                .cast(DataType::Int64)
                .alias("hour"),
            col("interval_ms").cast(DataType::Int64),
            free.cast(DataType::Int32).alias("free"),
        ])
        .group_by([col("node"), col("uuid"), col("hour")])
        .agg([
            col("free").min().alias("all_free"),
            col("interval_ms").sum().alias("covered"),
            col("model").drop_nulls().first().alias("model"),
        ])
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
    let gpus_df = per_gpu
        .clone()
        .lazy()
        .select([col("node"), col("uuid"), col("model")])
        .unique(None, UniqueKeepStrategy::Any)
        .group_by([col("model")])
        .agg([len().cast(DataType::Int64).alias("gpus")])
        .collect()?;
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
        .agg([col("is_free").sum().alias("free")])
        .collect()?;
    let mut out = FreeGpus::default();
    let model = columns::strs(&gpus_df, "model")?;
    let count = columns::i64s(&gpus_df, "gpus")?;
    for i in 0..gpus_df.height() {
        if let (Some(m), Some(g)) = (model.get(i), count.get(i)) {
            out.gpus.insert(m.to_string(), g.max(0) as usize);
        }
    }
    let hour = columns::i64s(&df, "hour")?;
    let model = columns::strs(&df, "model")?;
    let freec = columns::i64s(&df, "free")?;
    for i in 0..df.height() {
        if let (Some(h), Some(m), Some(f)) = (hour.get(i), model.get(i), freec.get(i)) {
            let e = out.per_hour.entry(h).or_default();
            if f > 0 {
                e.insert(m.to_string(), f as u32);
            }
        }
    }
    Ok(out)
}
