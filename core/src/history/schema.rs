//! The history schema as data: the three tables (`gpu`, `mig`, `process`), their columns, arrow
//! types and nullability, exactly as `docs/history-format.md` lists them. This is the single
//! source of truth: the writer builds its Parquet schema from it and the readers check files
//! against it.
//!
//! Also the glue between typed rows and arrow columns ([`ColumnValue`], [`HistoryRow`] and the
//! `history_row!` macro that declares a row struct); a unit test checks every row struct against
//! these tables, so the code cannot drift from the data.
//!
//! This module does no I/O.

use std::sync::Arc;

use arrow_array::{
    Array, ArrayRef, BooleanArray, Float64Array, Int64Array, StringArray, UInt32Array, UInt64Array,
};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

/// Version of the history format written by this code (the manifest's `version`). Version 2
/// added the GPM profiling columns, version 3 the holders of each GPU and MIG instance
/// (`Column::since`).
pub const HISTORY_VERSION: u32 = 3;

/// The oldest version this code reads: files of versions `OLDEST_VERSION..=HISTORY_VERSION`
/// are read, a column added after a file's version reading as null.
pub const OLDEST_VERSION: u32 = 1;

/// Name of the manifest file in a node folder.
pub const MANIFEST_FILE: &str = "tessera-history.json";

/// The value of the manifest's `format` field.
pub const FORMAT_NAME: &str = "tessera-history";

/// Column types used by the history (a subset of arrow's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColType {
    Int64,
    UInt32,
    UInt64,
    Float64,
    Utf8,
    Bool,
}

impl ColType {
    /// An all-null array of this type (a column a file of an older version lacks).
    pub fn null_array(self, len: usize) -> ArrayRef {
        arrow_array::new_null_array(&self.data_type(), len)
    }

    /// The arrow type.
    pub fn data_type(self) -> DataType {
        match self {
            ColType::Int64 => DataType::Int64,
            ColType::UInt32 => DataType::UInt32,
            ColType::UInt64 => DataType::UInt64,
            ColType::Float64 => DataType::Float64,
            ColType::Utf8 => DataType::Utf8,
            ColType::Bool => DataType::Boolean,
        }
    }
}

/// One column: name, type, nullability, and the format version that added it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Column {
    pub name: &'static str,
    pub ty: ColType,
    pub nullable: bool,
    /// The format version that added the column: a file may lack a column added after
    /// [`OLDEST_VERSION`] (it reads as null); every other column is required.
    pub since: u32,
}

impl Column {
    /// Whether a file may lack this column (added after the oldest readable version; always
    /// nullable).
    pub fn may_be_missing(&self) -> bool {
        self.since > OLDEST_VERSION
    }
}

const fn c(name: &'static str, ty: ColType, nullable: bool) -> Column {
    Column {
        name,
        ty,
        nullable,
        since: 1,
    }
}

/// A nullable column added in format version 2 (the GPM profiling pipes).
const fn v2(name: &'static str, ty: ColType) -> Column {
    Column {
        name,
        ty,
        nullable: true,
        since: 2,
    }
}

/// A nullable column added in format version 3 (who holds each device by allocation).
const fn v3(name: &'static str, ty: ColType) -> Column {
    Column {
        name,
        ty,
        nullable: true,
        since: 3,
    }
}

use ColType::{Bool, Float64, Int64, UInt32, UInt64, Utf8};

/// Columns every table starts with.
pub const COMMON: [Column; 6] = [
    c("ts", Int64, false),
    c("interval_ms", Int64, false),
    c("node", Utf8, false),
    c("gpu", UInt32, false),
    c("uuid", Utf8, false),
    c("samples", UInt32, false),
];

const GPU: &[Column] = &[
    COMMON[0],
    COMMON[1],
    COMMON[2],
    COMMON[3],
    COMMON[4],
    COMMON[5],
    c("model", Utf8, false),
    c("status", Utf8, false),
    c("busy_mean", Float64, true),
    c("busy_max", Float64, true),
    c("sm_active_mean", Float64, true),
    c("sm_active_max", Float64, true),
    c("sm_occupancy_mean", Float64, true),
    c("memory_controller_mean", Float64, true),
    c("memory_used_max_bytes", UInt64, true),
    c("memory_total_bytes", UInt64, true),
    c("power_mean_watts", Float64, true),
    c("energy_delta_joules", Float64, true),
    c("temperature_max_celsius", Float64, true),
    c("xid_count", UInt32, false),
    c("mig_enabled", Bool, true),
    v2("tensor_active_mean", Float64),
    v2("tensor_active_max", Float64),
    v2("dram_active_mean", Float64),
    v2("fp64_active_mean", Float64),
    v2("fp32_active_mean", Float64),
    v2("fp16_active_mean", Float64),
    v2("integer_active_mean", Float64),
    v2("nvlink_tx_mean_bytes_per_second", Float64),
    v2("nvlink_rx_mean_bytes_per_second", Float64),
    v3("holders", UInt32),
    v3("holder_namespace", Utf8),
    v3("holder_pod", Utf8),
    v3("holder_slurm_job_id", Utf8),
];

const MIG: &[Column] = &[
    COMMON[0],
    COMMON[1],
    COMMON[2],
    COMMON[3],
    COMMON[4],
    COMMON[5],
    c("gpu_instance", UInt32, false),
    c("compute_instance", UInt32, false),
    c("profile", Utf8, false),
    c("profile_id", UInt32, false),
    c("placement_start", UInt32, false),
    c("placement_size", UInt32, false),
    c("mig_uuid", Utf8, false),
    c("memory_used_max_bytes", UInt64, true),
    c("memory_total_bytes", UInt64, true),
    c("sm_active_mean", Float64, true),
    c("sm_active_max", Float64, true),
    v2("tensor_active_mean", Float64),
    v2("dram_active_mean", Float64),
    v3("holders", UInt32),
    v3("holder_namespace", Utf8),
    v3("holder_pod", Utf8),
    v3("holder_slurm_job_id", Utf8),
];

const PROCESS: &[Column] = &[
    COMMON[0],
    COMMON[1],
    COMMON[2],
    COMMON[3],
    COMMON[4],
    COMMON[5],
    c("pid", UInt32, false),
    c("process", Utf8, true),
    c("gpu_instance", UInt32, true),
    c("compute_instance", UInt32, true),
    c("pod_uid", Utf8, true),
    c("container_id", Utf8, true),
    c("slurm_job_id", Utf8, true),
    c("namespace", Utf8, true),
    c("pod", Utf8, true),
    c("memory_used_max_bytes", UInt64, true),
    c("sm_mean", Float64, true),
    c("sm_max", Float64, true),
];

/// The three tables of the history (serialised by their names: `gpu`, `mig`, `process`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Table {
    Gpu,
    Mig,
    Process,
}

impl Table {
    /// Every table, in a fixed order.
    pub const ALL: [Table; 3] = [Table::Gpu, Table::Mig, Table::Process];

    /// The table's name (also its folder name and the `table` label of the self-metrics).
    pub fn name(self) -> &'static str {
        match self {
            Table::Gpu => "gpu",
            Table::Mig => "mig",
            Table::Process => "process",
        }
    }

    /// The table named `s`.
    pub fn parse(s: &str) -> Option<Table> {
        Table::ALL.into_iter().find(|t| t.name() == s)
    }

    /// The table's columns, in file order.
    pub fn columns(self) -> &'static [Column] {
        match self {
            Table::Gpu => GPU,
            Table::Mig => MIG,
            Table::Process => PROCESS,
        }
    }

    /// The column named `name`.
    pub fn column(self, name: &str) -> Option<&'static Column> {
        self.columns().iter().find(|c| c.name == name)
    }

    /// The arrow schema of the table (what Parquet files carry).
    pub fn arrow_schema(self) -> SchemaRef {
        Arc::new(Schema::new(
            self.columns()
                .iter()
                .map(|c| Field::new(c.name, c.ty.data_type(), c.nullable))
                .collect::<Vec<_>>(),
        ))
    }
}

/// A Rust type that maps onto one history column type.
pub trait ColumnValue: Sized + Clone {
    /// The column type.
    const TYPE: ColType;
    /// Whether the Rust type admits nulls (`Option<_>`).
    const NULLABLE: bool;
    /// Build an arrow array from the values of one column.
    fn to_array(values: Vec<Self>) -> ArrayRef;
    /// Read one column back; `Err((row, message))` for a null in a non-nullable column or a
    /// wrong type.
    fn from_array(array: &dyn Array) -> Result<Vec<Self>, (usize, String)>;
}

fn downcast<A: 'static>(array: &dyn Array, ty: ColType) -> Result<&A, (usize, String)> {
    array.as_any().downcast_ref::<A>().ok_or_else(|| {
        (
            0,
            format!("expected {:?}, found {}", ty.data_type(), array.data_type()),
        )
    })
}

macro_rules! column_value {
    ($t:ty, $ty:expr, $arr:ty, |$v:ident| $get:expr) => {
        impl ColumnValue for $t {
            const TYPE: ColType = $ty;
            const NULLABLE: bool = false;
            fn to_array(values: Vec<Self>) -> ArrayRef {
                Arc::new(<$arr>::from(values))
            }
            fn from_array(array: &dyn Array) -> Result<Vec<Self>, (usize, String)> {
                let a = downcast::<$arr>(array, $ty)?;
                (0..a.len())
                    .map(|i| {
                        if a.is_null(i) {
                            Err((i, "null in a non-nullable column".to_string()))
                        } else {
                            let $v = a.value(i);
                            Ok($get)
                        }
                    })
                    .collect()
            }
        }
        impl ColumnValue for Option<$t> {
            const TYPE: ColType = $ty;
            const NULLABLE: bool = true;
            fn to_array(values: Vec<Self>) -> ArrayRef {
                Arc::new(<$arr>::from(values))
            }
            fn from_array(array: &dyn Array) -> Result<Vec<Self>, (usize, String)> {
                let a = downcast::<$arr>(array, $ty)?;
                Ok((0..a.len())
                    .map(|i| {
                        if a.is_null(i) {
                            None
                        } else {
                            let $v = a.value(i);
                            Some($get)
                        }
                    })
                    .collect())
            }
        }
    };
}

column_value!(i64, ColType::Int64, Int64Array, |v| v);
column_value!(u32, ColType::UInt32, UInt32Array, |v| v);
column_value!(u64, ColType::UInt64, UInt64Array, |v| v);
column_value!(f64, ColType::Float64, Float64Array, |v| v);
column_value!(bool, ColType::Bool, BooleanArray, |v| v);
column_value!(String, ColType::Utf8, StringArray, |v| v.to_string());

/// A typed row of one table, convertible to and from arrow columns and JSON.
pub trait HistoryRow:
    Sized + Clone + serde::Serialize + serde::de::DeserializeOwned + Send + 'static
{
    /// The table this row belongs to.
    const TABLE: Table;
    /// Field names and their (type, nullable), in declaration order (checked against the table).
    fn fields() -> Vec<(&'static str, ColType, bool)>;
    /// The row's `ts` (unix ms, end of its interval).
    fn ts(&self) -> i64;
    /// Columns of `rows`, in the table's order.
    fn to_columns(rows: &[Self]) -> Vec<ArrayRef>;
    /// Rows from columns in the table's order; `Err((column, row, message))`.
    fn from_columns(columns: &[ArrayRef]) -> Result<Vec<Self>, (&'static str, usize, String)>;
}

/// Declare a row struct of a history table, with serde and arrow conversions.
macro_rules! history_row {
    ($(#[$m:meta])* $name:ident, $table:expr, { $($(#[$fm:meta])* $field:ident : $ty:ty),* $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct $name { $($(#[$fm])* pub $field: $ty,)* }

        impl $crate::history::schema::HistoryRow for $name {
            const TABLE: $crate::history::schema::Table = $table;
            fn fields() -> Vec<(&'static str, $crate::history::schema::ColType, bool)> {
                use $crate::history::schema::ColumnValue;
                vec![$((stringify!($field), <$ty as ColumnValue>::TYPE, <$ty as ColumnValue>::NULLABLE)),*]
            }
            fn ts(&self) -> i64 {
                self.ts
            }
            fn to_columns(rows: &[Self]) -> Vec<arrow_array::ArrayRef> {
                use $crate::history::schema::ColumnValue;
                vec![$(<$ty as ColumnValue>::to_array(rows.iter().map(|r| r.$field.clone()).collect())),*]
            }
            fn from_columns(
                columns: &[arrow_array::ArrayRef],
            ) -> Result<Vec<Self>, (&'static str, usize, String)> {
                use $crate::history::schema::ColumnValue;
                let mut it = columns.iter();
                $(
                    let $field: Vec<$ty> = match it.next() {
                        Some(a) => <$ty as ColumnValue>::from_array(a.as_ref())
                            .map_err(|(row, m)| (stringify!($field), row, m))?,
                        None => return Err((stringify!($field), 0, "missing column".to_string())),
                    };
                )*
                let n = columns.first().map(|c| c.len()).unwrap_or(0);
                Ok((0..n).map(|i| $name { $($field: $field[i].clone(),)* }).collect())
            }
        }
    };
}
pub(crate) use history_row;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_start_with_the_common_columns_and_names_are_unique() {
        for t in Table::ALL {
            assert_eq!(&t.columns()[..6], &COMMON[..]);
            let mut names: Vec<_> = t.columns().iter().map(|c| c.name).collect();
            names.sort();
            names.dedup();
            assert_eq!(names.len(), t.columns().len(), "{}", t.name());
            assert_eq!(Table::parse(t.name()), Some(t));
            assert_eq!(t.arrow_schema().fields().len(), t.columns().len());
        }
    }
}
