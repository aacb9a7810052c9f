//! Typed access to collected frame columns for detectors: each accessor casts once and returns a
//! small reader with `get(i)`, so detectors can walk sorted rows without copying strings.
//!
//! This module does not decide anything; it only hides polars' casting and chunk handling.

use polars::prelude::*;
use polars_arrow::array::Array as _;

use super::AdvisorError;

/// A utf8 column.
pub struct Strs(StringChunked);
/// A float column (non-finite values read as missing).
pub struct F64s(Vec<Option<f64>>);
/// An integer column (read as i64).
pub struct I64s(Vec<Option<i64>>);
/// A boolean column.
pub struct Bools(Vec<Option<bool>>);

impl Strs {
    pub fn get(&self, i: usize) -> Option<&str> {
        self.0.get(i)
    }

    /// Per row, the string's 128-bit arrow *view* (`None` for null): equal views mean equal
    /// strings within this column (one chunk, so one set of buffers), which lets hot loops key
    /// rows by integers and look at the string only the first time a view is seen. Equal
    /// strings may still have different views; callers map views to string keys.
    pub fn view_keys(&self) -> Vec<Option<u128>> {
        let mut out = Vec::with_capacity(self.0.len());
        for arr in self.0.downcast_iter() {
            let views = arr.views();
            match arr.validity() {
                Some(valid) => out.extend(
                    views
                        .iter()
                        .enumerate()
                        .map(|(i, v)| valid.get_bit(i).then(|| v.as_u128())),
                ),
                None => out.extend(views.iter().map(|v| Some(v.as_u128()))),
            }
        }
        out
    }
}
impl F64s {
    pub fn get(&self, i: usize) -> Option<f64> {
        self.0.get(i).copied().flatten()
    }
}
impl I64s {
    pub fn get(&self, i: usize) -> Option<i64> {
        self.0.get(i).copied().flatten()
    }
}
impl Bools {
    pub fn get(&self, i: usize) -> Option<bool> {
        self.0.get(i).copied().flatten()
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
    let s = column(df, name, &DataType::Float64)?;
    Ok(F64s(
        s.f64()?
            .iter()
            .map(|v| v.filter(|x| x.is_finite()))
            .collect(),
    ))
}
pub fn i64s(df: &DataFrame, name: &str) -> Result<I64s, AdvisorError> {
    let s = column(df, name, &DataType::Int64)?;
    Ok(I64s(s.i64()?.iter().collect()))
}
pub fn bools(df: &DataFrame, name: &str) -> Result<Bools, AdvisorError> {
    let s = column(df, name, &DataType::Boolean)?;
    Ok(Bools(s.bool()?.iter().collect()))
}

/// A hash map with a fast, deterministic (non-DoS-resistant) hasher, for row keys.
pub type FastMap<K, V> = rustc_hash::FxHashMap<K, V>;
/// A hash set with the same hasher.
pub type FastSet<K> = rustc_hash::FxHashSet<K>;

/// `ts` as unix ms (Int64) under the same name.
pub fn ts_ms() -> Expr {
    col("ts").cast(DataType::Int64)
}

/// Row indices of each entity (rows with equal `keys`), each sorted by `ts`, entities in key
/// order. Grouping happens here, not in polars: hashing borrowed strings is much cheaper than a
/// multi-column string sort of the whole frame, and rows usually arrive in time order already.
pub fn groups(keys: &[&Strs], ts: &I64s, n: usize) -> Vec<Vec<usize>> {
    type Key<'a> = Vec<Option<&'a str>>;
    let mut index: FastMap<Key, usize> = FastMap::default();
    let mut out: Vec<(Key, Vec<usize>)> = Vec::new();
    let mut last: Option<usize> = None;
    for i in 0..n {
        // Fast path: same entity as the previous row.
        if let Some(g) = last
            && keys.iter().zip(&out[g].0).all(|(c, k)| c.get(i) == *k)
        {
            out[g].1.push(i);
            continue;
        }
        let k: Key = keys.iter().map(|c| c.get(i)).collect();
        let g = *index.entry(k.clone()).or_insert_with(|| {
            out.push((k, Vec::new()));
            out.len() - 1
        });
        out[g].1.push(i);
        last = Some(g);
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out.into_iter()
        .map(|(_, mut v)| {
            if !v.windows(2).all(|w| ts.get(w[0]) <= ts.get(w[1])) {
                v.sort_by_key(|&i| ts.get(i));
            }
            v
        })
        .collect()
}
