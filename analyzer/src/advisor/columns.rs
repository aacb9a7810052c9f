//! Typed access to collected frame columns for detectors: each accessor casts once and returns a
//! small reader with `get(i)`, so detectors can walk sorted rows without copying strings.
//!
//! This module does not decide anything; it only hides polars' casting and chunk handling.

use polars::prelude::*;

use super::AdvisorError;

/// A utf8 column.
pub struct Strs(StringChunked);
/// A float column.
pub struct F64s(Float64Chunked);
/// An integer column (read as i64).
pub struct I64s(Int64Chunked);
/// A boolean column.
pub struct Bools(BooleanChunked);

impl Strs {
    pub fn get(&self, i: usize) -> Option<&str> {
        self.0.get(i)
    }
}
impl F64s {
    pub fn get(&self, i: usize) -> Option<f64> {
        self.0.get(i).filter(|v| v.is_finite())
    }
}
impl I64s {
    pub fn get(&self, i: usize) -> Option<i64> {
        self.0.get(i)
    }
}
impl Bools {
    pub fn get(&self, i: usize) -> Option<bool> {
        self.0.get(i)
    }
}

fn column(df: &DataFrame, name: &str, dt: &DataType) -> Result<Series, AdvisorError> {
    let s = df
        .column(name)?
        .as_materialized_series()
        .cast(dt)?
        .rechunk();
    Ok(s)
}

pub fn strs(df: &DataFrame, name: &str) -> Result<Strs, AdvisorError> {
    Ok(Strs(column(df, name, &DataType::String)?.str()?.clone()))
}
pub fn f64s(df: &DataFrame, name: &str) -> Result<F64s, AdvisorError> {
    Ok(F64s(column(df, name, &DataType::Float64)?.f64()?.clone()))
}
pub fn i64s(df: &DataFrame, name: &str) -> Result<I64s, AdvisorError> {
    Ok(I64s(column(df, name, &DataType::Int64)?.i64()?.clone()))
}
pub fn bools(df: &DataFrame, name: &str) -> Result<Bools, AdvisorError> {
    Ok(Bools(column(df, name, &DataType::Boolean)?.bool()?.clone()))
}

/// `ts` as unix ms (Int64) under the same name.
pub fn ts_ms() -> Expr {
    col("ts").cast(DataType::Int64)
}

/// Rows of one entity in a frame sorted by entity keys then `ts`: yields `start..end` index
/// ranges where all of `keys` are equal.
pub fn runs(keys: &[&Strs], n: usize) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    for i in 1..=n {
        let boundary = i == n || keys.iter().any(|k| k.get(i) != k.get(i - 1));
        if boundary {
            out.push(start..i);
            start = i;
        }
    }
    if n == 0 {
        out.clear();
    }
    out
}
