//! The column lists of the history format (`docs/history-format.md`; versions 1 and 2) as the analyzer sees
//! them, and the canonical frames' polars schema derived from them (`docs/frames.md`). The lists
//! are not restated here: they are read from the exporter's `tessera_core::history::schema`,
//! the one declaration of the contract that both the writer and this reader use.
//!
//! This module only declares columns and maps them to polars types; it does not read files.
//! `ts` is `int64` unix milliseconds in the history files and `Datetime(ms, UTC)` in the frames;
//! the frames add a `source` column. A test checks these lists against the tables in the doc.

use std::sync::OnceLock;

use polars::prelude::{DataType, Field, Schema, TimeUnit, TimeZone};
use tessera_core::history::schema as contract;

/// History format version the exporter writes (the newest this reader understands).
pub const HISTORY_VERSION: u64 = contract::HISTORY_VERSION as u64;

/// The oldest history format version this reader understands.
pub const OLDEST_VERSION: u64 = contract::OLDEST_VERSION as u64;

/// Whether this reader reads history format version `v`.
pub fn readable_version(v: u64) -> bool {
    (OLDEST_VERSION..=HISTORY_VERSION).contains(&v)
}

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
    /// Added after the oldest readable version: a file may lack it (read as null).
    pub may_be_missing: bool,
}

impl From<contract::ColType> for ColType {
    fn from(t: contract::ColType) -> ColType {
        match t {
            contract::ColType::Int64 => ColType::Int64,
            contract::ColType::UInt32 => ColType::UInt32,
            contract::ColType::UInt64 => ColType::UInt64,
            contract::ColType::Float64 => ColType::Float64,
            contract::ColType::Utf8 => ColType::Utf8,
            contract::ColType::Bool => ColType::Bool,
        }
    }
}

impl From<&contract::Column> for Col {
    fn from(c: &contract::Column) -> Col {
        Col {
            name: c.name,
            ty: c.ty.into(),
            nullable: c.nullable,
            may_be_missing: c.may_be_missing(),
        }
    }
}

/// Columns common to every table, in order.
pub fn common() -> &'static [Col] {
    static COMMON: OnceLock<Vec<Col>> = OnceLock::new();
    COMMON.get_or_init(|| contract::COMMON.iter().map(Col::from).collect())
}

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

    /// The exporter's table of the same name.
    fn contract(self) -> contract::Table {
        match self {
            Table::Gpu => contract::Table::Gpu,
            Table::Mig => contract::Table::Mig,
            Table::Process => contract::Table::Process,
        }
    }

    /// Columns of this table after the common ones.
    pub fn own_columns(self) -> &'static [Col] {
        static OWN: OnceLock<[Vec<Col>; 3]> = OnceLock::new();
        let own = OWN.get_or_init(|| {
            Table::ALL.map(|t| {
                t.contract().columns()[contract::COMMON.len()..]
                    .iter()
                    .map(Col::from)
                    .collect()
            })
        });
        &own[self as usize]
    }

    /// Every column of the table as stored in history files, in order.
    pub fn columns(self) -> impl Iterator<Item = Col> {
        common().iter().chain(self.own_columns()).copied()
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
