//! The history tables as polars sees them: core's vocabulary (`tessera_core::history::schema`:
//! [`Table`], [`Column`], [`ColType`], the one declaration of the contract that the writer and
//! the readers use) re-exported, with the polars types of its columns ([`Polars`]) and the
//! schemas of a history file and of a canonical frame ([`TableSchema`], `docs/frames.md`).
//!
//! Nothing is restated here: no column list, no table enum of its own. It reads no file. `ts` is
//! `int64` unix milliseconds in the history files and `Datetime(ms, UTC)` in the frames; the
//! frames add a `source` column.

use polars::prelude::{DataType, Field, Schema, TimeUnit, TimeZone};
pub use tessera_core::history::schema::{COMMON, ColType, Column, Table};

/// The polars side of a history column type.
pub trait Polars {
    /// The polars type of the column in a history Parquet file.
    fn polars(self) -> DataType;
    /// The name `docs/history-format.md` uses.
    fn doc_name(self) -> &'static str;
}

impl Polars for ColType {
    fn polars(self) -> DataType {
        match self {
            ColType::Int64 => DataType::Int64,
            ColType::Utf8 => DataType::String,
            ColType::UInt32 => DataType::UInt32,
            ColType::UInt64 => DataType::UInt64,
            ColType::Float64 => DataType::Float64,
            ColType::Bool => DataType::Boolean,
        }
    }

    fn doc_name(self) -> &'static str {
        match self {
            ColType::Int64 => "int64",
            ColType::Utf8 => "utf8",
            ColType::UInt32 => "uint32",
            ColType::UInt64 => "uint64",
            ColType::Float64 => "float64",
            ColType::Bool => "bool",
        }
    }
}

/// A table's polars schemas.
pub trait TableSchema {
    /// Columns of this table after the common ones.
    fn own_columns(self) -> &'static [Column];
    /// The schema of the table in a history Parquet file (`ts` as int64).
    fn file_schema(self) -> Schema;
    /// The schema of the table's canonical frame: `ts` as `Datetime(ms, UTC)`, then `source`.
    fn frame_schema(self) -> Schema;
}

impl TableSchema for Table {
    fn own_columns(self) -> &'static [Column] {
        &self.columns()[COMMON.len()..]
    }

    fn file_schema(self) -> Schema {
        self.columns()
            .iter()
            .map(|c| Field::new(c.name.into(), c.ty.polars()))
            .collect()
    }

    fn frame_schema(self) -> Schema {
        self.columns()
            .iter()
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
