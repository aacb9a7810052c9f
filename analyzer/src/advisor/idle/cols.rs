//! The idle-loaded detector's inputs: the columns of the GPU, MIG and process frames that
//! [`super::rows`] reads, selected and collected once per partition, with typed readers.
//!
//! This module only selects and reads columns; it does not match rows or build entities (that
//! is [`super::rows`]).

use polars::prelude::*;

use crate::advisor::AdvisorError;
use crate::frames::Frames;
use crate::frames::columns::{self, Bools, F64s, I64s, Strs, ts_ms};

/// The GPU frame's columns the detector reads.
pub(super) fn gpu_frame(frames: &Frames) -> Result<DataFrame, AdvisorError> {
    Ok(frames
        .gpu
        .clone()
        .select([
            col("node"),
            col("uuid"),
            col("gpu").cast(DataType::Int64),
            ts_ms().alias("ts"),
            col("interval_ms").cast(DataType::Int64),
            col("sm_active_max"),
            col("busy_max"),
            col("memory_used_max_bytes")
                .cast(DataType::Float64)
                .alias("mem"),
            col("model"),
            col("mig_enabled"),
        ])
        .collect()?)
}

/// The MIG frame's columns the detector reads.
pub(super) fn mig_frame(frames: &Frames) -> Result<DataFrame, AdvisorError> {
    Ok(frames
        .mig
        .clone()
        .select([
            col("node"),
            col("uuid"),
            col("gpu").cast(DataType::Int64),
            col("gpu_instance").cast(DataType::Int64),
            ts_ms().alias("ts"),
            col("interval_ms").cast(DataType::Int64),
            col("sm_active_max"),
            col("memory_used_max_bytes")
                .cast(DataType::Float64)
                .alias("mem"),
            col("mig_uuid"),
            col("profile"),
        ])
        .collect()?)
}

/// The process frame's columns the detector reads.
pub(super) fn process_frame(frames: &Frames) -> Result<DataFrame, AdvisorError> {
    Ok(frames
        .process
        .clone()
        .select([
            col("node"),
            col("uuid"),
            col("gpu").cast(DataType::Int64),
            col("pid").cast(DataType::Int64),
            col("process"),
            col("gpu_instance").cast(DataType::Int64),
            col("namespace"),
            col("pod").fill_null(col("pod_uid")).alias("pod"),
            col("slurm_job_id"),
            ts_ms().alias("ts"),
            col("interval_ms").cast(DataType::Int64),
            col("memory_used_max_bytes")
                .cast(DataType::Float64)
                .alias("mem"),
            col("sm_max"),
        ])
        .collect()?)
}

/// [`gpu_frame`]'s columns, read.
pub(super) struct GpuCols {
    pub(super) height: usize,
    pub(super) node: Strs,
    pub(super) uuid: Strs,
    pub(super) gpu: I64s,
    pub(super) ts: I64s,
    pub(super) iv: I64s,
    pub(super) sm: F64s,
    pub(super) busy: F64s,
    pub(super) mem: F64s,
    pub(super) model: Strs,
    pub(super) mig: Bools,
}

impl GpuCols {
    pub(super) fn of(df: &DataFrame) -> Result<GpuCols, AdvisorError> {
        Ok(GpuCols {
            height: df.height(),
            node: columns::strs(df, "node")?,
            uuid: columns::strs(df, "uuid")?,
            gpu: columns::i64s(df, "gpu")?,
            ts: columns::i64s(df, "ts")?,
            iv: columns::i64s(df, "interval_ms")?,
            sm: columns::f64s(df, "sm_active_max")?,
            busy: columns::f64s(df, "busy_max")?,
            mem: columns::f64s(df, "mem")?,
            model: columns::strs(df, "model")?,
            mig: columns::bools(df, "mig_enabled")?,
        })
    }

    /// The GPU's SM activity and busy at `row` (both missing without a row).
    pub(super) fn act(&self, row: Option<usize>) -> [(Option<f64>, &'static str); 2] {
        match row {
            Some(i) => [
                (self.sm.get(i), "gpu_sm_active"),
                (self.busy.get(i), "gpu_busy"),
            ],
            None => [(None, "gpu_sm_active"), (None, "gpu_busy")],
        }
    }
}

/// [`mig_frame`]'s columns, read.
pub(super) struct MigCols {
    pub(super) height: usize,
    pub(super) node: Strs,
    pub(super) uuid: Strs,
    pub(super) gpu: I64s,
    pub(super) gi: I64s,
    pub(super) ts: I64s,
    pub(super) iv: I64s,
    pub(super) sm: F64s,
    pub(super) mem: F64s,
    pub(super) mig_uuid: Strs,
    pub(super) profile: Strs,
}

impl MigCols {
    pub(super) fn of(df: &DataFrame) -> Result<MigCols, AdvisorError> {
        Ok(MigCols {
            height: df.height(),
            node: columns::strs(df, "node")?,
            uuid: columns::strs(df, "uuid")?,
            gpu: columns::i64s(df, "gpu")?,
            gi: columns::i64s(df, "gpu_instance")?,
            ts: columns::i64s(df, "ts")?,
            iv: columns::i64s(df, "interval_ms")?,
            sm: columns::f64s(df, "sm_active_max")?,
            mem: columns::f64s(df, "mem")?,
            mig_uuid: columns::strs(df, "mig_uuid")?,
            profile: columns::strs(df, "profile")?,
        })
    }
}

/// [`process_frame`]'s columns, read.
pub(super) struct ProcCols {
    pub(super) height: usize,
    pub(super) node: Strs,
    pub(super) uuid: Strs,
    pub(super) gpu: I64s,
    pub(super) pid: I64s,
    pub(super) proc: Strs,
    pub(super) gi: I64s,
    pub(super) ns: Strs,
    pub(super) pod: Strs,
    pub(super) job: Strs,
    pub(super) ts: I64s,
    pub(super) iv: I64s,
    pub(super) mem: F64s,
    pub(super) sm: F64s,
}

impl ProcCols {
    pub(super) fn of(df: &DataFrame) -> Result<ProcCols, AdvisorError> {
        Ok(ProcCols {
            height: df.height(),
            node: columns::strs(df, "node")?,
            uuid: columns::strs(df, "uuid")?,
            gpu: columns::i64s(df, "gpu")?,
            pid: columns::i64s(df, "pid")?,
            proc: columns::strs(df, "process")?,
            gi: columns::i64s(df, "gpu_instance")?,
            ns: columns::strs(df, "namespace")?,
            pod: columns::strs(df, "pod")?,
            job: columns::strs(df, "slurm_job_id")?,
            ts: columns::i64s(df, "ts")?,
            iv: columns::i64s(df, "interval_ms")?,
            mem: columns::f64s(df, "mem")?,
            sm: columns::f64s(df, "sm_max")?,
        })
    }
}
