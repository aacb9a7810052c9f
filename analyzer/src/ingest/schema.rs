//! The column lists of history format version 1 (`docs/history-format.md`) and the canonical
//! frames' polars schema derived from them (`docs/frames.md`), declared once here.
//!
//! This module only declares columns and maps them to polars types; it does not read files.
//! `ts` is `int64` unix milliseconds in the history files and `Datetime(ms, UTC)` in the frames;
//! the frames add a `source` column. A test checks these lists against the tables in the doc.

use polars::prelude::{DataType, Field, Schema, TimeUnit, TimeZone};

/// History format version this reader understands.
pub const HISTORY_VERSION: u64 = 1;

/// The value type of a history column, as written in the doc's tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColType {
    Int64,
    Utf8,
    UInt32,
    UInt64,
    Float64,
    Bool,
}

impl ColType {
    /// The name used in `docs/history-format.md`.
    pub fn doc_name(self) -> &'static str {
        match self {
            ColType::Int64 => "int64",
            ColType::Utf8 => "utf8",
            ColType::UInt32 => "uint32",
            ColType::UInt64 => "uint64",
            ColType::Float64 => "float64",
            ColType::Bool => "bool",
        }
    }

    /// The polars type of the column in a history Parquet file.
    pub fn polars(self) -> DataType {
        match self {
            ColType::Int64 => DataType::Int64,
            ColType::Utf8 => DataType::String,
            ColType::UInt32 => DataType::UInt32,
            ColType::UInt64 => DataType::UInt64,
            ColType::Float64 => DataType::Float64,
            ColType::Bool => DataType::Boolean,
        }
    }
}

/// One history column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Col {
    pub name: &'static str,
    pub ty: ColType,
    pub nullable: bool,
}

const fn c(name: &'static str, ty: ColType) -> Col {
    Col {
        name,
        ty,
        nullable: false,
    }
}
const fn n(name: &'static str, ty: ColType) -> Col {
    Col {
        name,
        ty,
        nullable: true,
    }
}

use ColType::*;

/// Columns common to every table, in order.
pub const COMMON: &[Col] = &[
    c("ts", Int64),
    c("interval_ms", Int64),
    c("node", Utf8),
    c("gpu", UInt32),
    c("uuid", Utf8),
    c("samples", UInt32),
];

/// Columns of the `gpu` table after the common ones.
pub const GPU: &[Col] = &[
    c("model", Utf8),
    c("status", Utf8),
    n("busy_mean", Float64),
    n("busy_max", Float64),
    n("sm_active_mean", Float64),
    n("sm_active_max", Float64),
    n("sm_occupancy_mean", Float64),
    n("memory_controller_mean", Float64),
    n("memory_used_max_bytes", UInt64),
    n("memory_total_bytes", UInt64),
    n("power_mean_watts", Float64),
    n("energy_delta_joules", Float64),
    n("temperature_max_celsius", Float64),
    c("xid_count", UInt32),
    n("mig_enabled", Bool),
];

/// Columns of the `mig` table after the common ones.
pub const MIG: &[Col] = &[
    c("gpu_instance", UInt32),
    c("compute_instance", UInt32),
    c("profile", Utf8),
    c("profile_id", UInt32),
    c("placement_start", UInt32),
    c("placement_size", UInt32),
    c("mig_uuid", Utf8),
    n("memory_used_max_bytes", UInt64),
    n("memory_total_bytes", UInt64),
    n("sm_active_mean", Float64),
    n("sm_active_max", Float64),
];

/// Columns of the `process` table after the common ones.
pub const PROCESS: &[Col] = &[
    c("pid", UInt32),
    n("process", Utf8),
    n("gpu_instance", UInt32),
    n("compute_instance", UInt32),
    n("pod_uid", Utf8),
    n("container_id", Utf8),
    n("slurm_job_id", Utf8),
    n("namespace", Utf8),
    n("pod", Utf8),
    n("memory_used_max_bytes", UInt64),
    n("sm_mean", Float64),
    n("sm_max", Float64),
];

/// The three history tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Table {
    Gpu,
    Mig,
    Process,
}

impl Table {
    pub const ALL: [Table; 3] = [Table::Gpu, Table::Mig, Table::Process];

    /// Folder and table name (`gpu`, `mig`, `process`).
    pub fn name(self) -> &'static str {
        match self {
            Table::Gpu => "gpu",
            Table::Mig => "mig",
            Table::Process => "process",
        }
    }

    /// Columns of this table after the common ones.
    pub fn own_columns(self) -> &'static [Col] {
        match self {
            Table::Gpu => GPU,
            Table::Mig => MIG,
            Table::Process => PROCESS,
        }
    }

    /// Every column of the table as stored in history files, in order.
    pub fn columns(self) -> impl Iterator<Item = Col> {
        COMMON.iter().chain(self.own_columns()).copied()
    }

    /// Looks a column up by name.
    pub fn column(self, name: &str) -> Option<Col> {
        self.columns().find(|c| c.name == name)
    }

    /// The schema of the table in a history Parquet file (`ts` as int64).
    pub fn file_schema(self) -> Schema {
        self.columns()
            .map(|c| Field::new(c.name.into(), c.ty.polars()))
            .collect()
    }

    /// The schema of the table's canonical frame: `ts` as `Datetime(ms, UTC)`, then `source`.
    pub fn frame_schema(self) -> Schema {
        self.columns()
            .map(|c| {
                let dt = if c.name == "ts" {
                    ts_dtype()
                } else {
                    c.ty.polars()
                };
                Field::new(c.name.into(), dt)
            })
            .chain(std::iter::once(Field::new(
                "source".into(),
                DataType::String,
            )))
            .collect()
    }
}

/// The type of `ts` in the canonical frames.
pub fn ts_dtype() -> DataType {
    DataType::Datetime(TimeUnit::Milliseconds, Some(TimeZone::UTC))
}
