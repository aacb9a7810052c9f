//! Occupancy from per-node counts: GPUs allocated and GPUs in total per node and time (the CSV's
//! `kind=node` rows, kube-state-metrics' pod requests and node allocatable) made into
//! **synthetic `gpu` rows**, the one expansion every source shares ([`NodeCounts`]).
//!
//! Per node, the `gpus_allocated` observations are put into rows at the node's own sampling
//! period by the common resampler (`(ts − interval_ms, ts]`, `samples` = distinct timestamps in
//! the row, the most allocated in the row), then each row becomes `gpus_total` rows: `gpu` =
//! 0..T−1, `uuid` = `<node>/gpu-<i>`, `holders` = 1 for `i` < allocated and 0 otherwise (null
//! when the row has no allocated value), every other value column and `model` null. `T` is the
//! node's `gpus_total` in force at the row's end: the latest value given at or before it, or,
//! before the first value, the first (a node's GPU count given once applies throughout).
//! `gpus_total` observations do not make rows or count as samples.
//!
//! Checks ([`NodeCounts::check`]): a node with `gpus_allocated` but no `gpus_total` is an error
//! at the node's first line (its GPU count is not guessed); `gpus_allocated` above the
//! `gpus_total` in force at that time is an error at that line. Whole numbers in 0–1024 are the
//! reader's check when it takes a value. A source whose held count is a sum over an interval
//! (kube-state-metrics' pods: one may end and another start on the same GPU within a step)
//! lowers a count above the total to it first ([`NodeCounts::clamp_to_totals`]).
//!
//! What it cannot say: which GPU of a node is held (GPU `i` < allocated is a convention, not a
//! fact), and anything about use — per-node counts carry no memory or activity, so idle-loaded
//! models, allocated-but-unused GPUs and consolidation are not judged on these rows; the free
//! GPUs per hour (off-peak windows) are exact. It reads no file or server.

use std::collections::BTreeMap;

use polars::prelude::*;

use super::IngestError;
use super::resample::{self, Agg, Observations, RowSpec, Sampling, Values};
use crate::frames::schema::{Polars as _, Table};

/// The metric (CSV) or quantity (Prometheus) of GPUs held on a node.
pub const ALLOCATED: &str = "gpus_allocated";
/// The metric or quantity of GPUs a node has.
pub const TOTAL: &str = "gpus_total";

/// A bad count: where (a line of the file, 0 when the source has none) and what.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct CountError {
    pub line: u64,
    pub reason: String,
}

/// Per-node counts of one source while they are collected.
#[derive(Debug, Default, Clone)]
pub struct NodeCounts {
    ids: BTreeMap<String, u32>,
    names: Vec<String>,
    first_line: Vec<u64>,
    /// `gpus_allocated` observations: node id, time (ms), raw samples, value, line.
    eid: Vec<u32>,
    ts: Vec<i64>,
    n: Vec<u32>,
    allocated: Vec<Option<f64>>,
    line: Vec<u64>,
    /// Per node: `gpus_total` observations (time, value, line), in the order given.
    totals: Vec<Vec<(i64, f64, u64)>>,
}

impl NodeCounts {
    /// Whether nothing was collected.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    fn id(&mut self, node: &str, line: u64) -> u32 {
        if let Some(&e) = self.ids.get(node) {
            return e;
        }
        let e = self.names.len() as u32;
        self.ids.insert(node.to_string(), e);
        self.names.push(node.to_string());
        self.first_line.push(line);
        self.totals.push(Vec::new());
        e
    }

    /// GPUs allocated on `node` at `ts_ms` (a point holding `samples` raw samples; `None`: no
    /// value, the time still counts as a sample).
    pub fn add_allocated(
        &mut self,
        node: &str,
        ts_ms: i64,
        samples: u32,
        value: Option<f64>,
        line: u64,
    ) {
        let e = self.id(node, line);
        self.eid.push(e);
        self.ts.push(ts_ms);
        self.n.push(samples.max(1));
        self.allocated.push(value);
        self.line.push(line);
    }

    /// GPUs `node` has, from `ts_ms` on.
    pub fn add_total(&mut self, node: &str, ts_ms: i64, value: f64, line: u64) {
        let e = self.id(node, line) as usize;
        self.totals[e].push((ts_ms, value, line));
    }

    /// Drops the nodes `skip` names (nodes whose GPUs a source also gives one by one: their
    /// counts would count those GPUs twice); returns the names dropped, sorted.
    pub fn drop_nodes(&mut self, skip: &std::collections::BTreeSet<&str>) -> Vec<String> {
        let gone: Vec<bool> = self
            .names
            .iter()
            .map(|n| skip.contains(n.as_str()))
            .collect();
        if !gone.contains(&true) {
            return Vec::new();
        }
        let mut kept = NodeCounts::default();
        for (e, name) in self.names.iter().enumerate() {
            if !gone[e] {
                let id = kept.id(name, self.first_line[e]) as usize;
                kept.totals[id] = self.totals[e].clone();
            }
        }
        for k in 0..self.eid.len() {
            let e = self.eid[k] as usize;
            if !gone[e] {
                let id = kept.ids[&self.names[e]];
                kept.eid.push(id);
                kept.ts.push(self.ts[k]);
                kept.n.push(self.n[k]);
                kept.allocated.push(self.allocated[k]);
                kept.line.push(self.line[k]);
            }
        }
        let mut dropped: Vec<String> = self
            .names
            .iter()
            .zip(&gone)
            .filter(|(_, g)| **g)
            .map(|(n, _)| n.clone())
            .collect();
        dropped.sort();
        *self = kept;
        dropped
    }

    /// Lowers every `gpus_allocated` value above the node's `gpus_total` in force at its time to
    /// that total (a source whose held count is a sum over an interval, in which a pod may end
    /// and another start on the same GPU); returns how many values each node had lowered.
    pub fn clamp_to_totals(&mut self) -> BTreeMap<String, u64> {
        let totals = self.sorted_totals();
        let mut out: BTreeMap<String, u64> = BTreeMap::new();
        for k in 0..self.eid.len() {
            let e = self.eid[k] as usize;
            if let (Some(a), Some(t)) = (self.allocated[k], total_at(&totals[e], self.ts[k]))
                && a > t
            {
                self.allocated[k] = Some(t);
                *out.entry(self.names[e].clone()).or_default() += 1;
            }
        }
        out
    }

    /// Appends the counts `o` collected after these (nodes renumbered in order of appearance).
    pub fn merge(&mut self, o: NodeCounts) {
        let remap: Vec<u32> = o
            .names
            .iter()
            .zip(&o.first_line)
            .map(|(name, &l)| self.id(name, l))
            .collect();
        for (e, t) in o.totals.into_iter().enumerate() {
            self.totals[remap[e] as usize].extend(t);
        }
        self.eid.extend(o.eid.iter().map(|&e| remap[e as usize]));
        self.ts.extend(o.ts);
        self.n.extend(o.n);
        self.allocated.extend(o.allocated);
        self.line.extend(o.line);
    }

    /// Per node, its totals sorted by time (stable: of two at one time, the later given wins).
    fn sorted_totals(&self) -> Vec<Vec<(i64, f64, u64)>> {
        self.totals
            .iter()
            .map(|t| {
                let mut t = t.clone();
                t.sort_by_key(|x| x.0);
                t
            })
            .collect()
    }

    /// Every node with `gpus_allocated` has a `gpus_total`, and no allocated value exceeds the
    /// total in force at its time. The first offence, by line.
    pub fn check(&self) -> Result<(), CountError> {
        let totals = self.sorted_totals();
        let mut has_allocated = vec![false; self.names.len()];
        let mut worst: Option<CountError> = None;
        let mut keep = |e: CountError| {
            if worst.as_ref().is_none_or(|w| e.line < w.line) {
                worst = Some(e);
            }
        };
        for k in 0..self.eid.len() {
            let e = self.eid[k] as usize;
            has_allocated[e] = true;
            let (Some(a), Some(t)) = (self.allocated[k], total_at(&totals[e], self.ts[k])) else {
                continue;
            };
            if a > t {
                keep(CountError {
                    line: self.line[k],
                    reason: format!(
                        "node {:?}: {ALLOCATED} {a} exceeds {TOTAL} {t} (the node's GPU count \
                         at this time); a node cannot hold more GPUs than it has",
                        self.names[e]
                    ),
                });
            }
        }
        for (e, name) in self.names.iter().enumerate() {
            if has_allocated[e] && totals[e].is_empty() {
                keep(CountError {
                    line: self.first_line[e],
                    reason: format!(
                        "node {name:?} has {ALLOCATED} but no {TOTAL}: how many GPUs it has is \
                         unknown, and not guessed; give {TOTAL} for the node (once is enough)"
                    ),
                });
            }
        }
        worst.map_or(Ok(()), Err)
    }

    /// The synthetic `gpu` rows (history file schema, `ts` as int64 ms) and what resampling
    /// found. `names` prefixes messages (`csv:FILE node`). Call [`NodeCounts::check`] first; a
    /// row whose most allocated exceeds its total (a total that fell inside the row) is an
    /// error here.
    pub fn into_rows(
        self,
        spec: RowSpec,
        names: &str,
    ) -> Result<(DataFrame, Sampling), OccupancyRowsError> {
        let totals = self.sorted_totals();
        let labels: Vec<Vec<(&'static str, String)>> = self
            .names
            .iter()
            .map(|n| vec![("node", n.clone())])
            .collect();
        let msg_names: Vec<String> = self.names.iter().map(|n| format!("{names} {n}")).collect();
        // The resampler builds canonical columns only: `gpus_allocated` goes in as `holders`
        // (the most allocated in the row), expanded below.
        let df = resample::frame(self.eid, self.ts, self.n, vec![("holders", self.allocated)])?;
        let obs = Observations {
            table: Table::Gpu,
            df,
            values: Values::Wide(vec![("holders", Agg::Max)]),
            labels,
            names: msg_names,
        };
        let (rows, sampling) = resample::resample(obs, spec)?;
        let ts = rows.column("ts")?.i64()?.clone();
        let iv = rows.column("interval_ms")?.i64()?.clone();
        let samples = rows.column("samples")?.u32()?.clone();
        let node = rows.column("node")?.str()?.clone();
        let alloc = rows.column("holders")?.u32()?.clone();
        let mut out = Expanded::default();
        // Rows come by node, then time: each node's GPUs one after another.
        let h = rows.height();
        let mut i = 0;
        while i < h {
            let name = node.get(i).unwrap_or_default().to_string();
            let mut j = i;
            while j < h && node.get(j) == node.get(i) {
                j += 1;
            }
            let e = self.ids.get(&name).copied().unwrap_or(0) as usize;
            let t_of = |r: usize| -> u32 {
                total_at(&totals[e], ts.get(r).unwrap_or(0)).map_or(0, |t| t as u32)
            };
            let max_t = (i..j).map(t_of).max().unwrap_or(0);
            for r in i..j {
                if let Some(a) = alloc.get(r)
                    && a > t_of(r)
                {
                    return Err(OccupancyRowsError::Exceeds(format!(
                        "node {name:?}: {a} GPUs allocated in the row ending at {} but {} in \
                         total at its end ({TOTAL} fell inside the row)",
                        super::fmt_ms(ts.get(r).unwrap_or(0)),
                        t_of(r)
                    )));
                }
            }
            for g in 0..max_t {
                let uuid = format!("{name}/gpu-{g}");
                for r in (i..j).filter(|&r| g < t_of(r)) {
                    out.ts.push(ts.get(r).unwrap_or(0));
                    out.iv.push(iv.get(r).unwrap_or(0));
                    out.samples.push(samples.get(r));
                    out.node.push(name.clone());
                    out.gpu.push(g);
                    out.uuid.push(uuid.clone());
                    out.holders.push(alloc.get(r).map(|a| u32::from(g < a)));
                }
            }
            i = j;
        }
        Ok((out.into_frame()?, sampling))
    }
}

/// The total in force at `ts`: the latest at or before it, else the first.
fn total_at(totals: &[(i64, f64, u64)], ts: i64) -> Option<f64> {
    let k = totals.partition_point(|x| x.0 <= ts);
    if k > 0 {
        Some(totals[k - 1].1)
    } else {
        totals.first().map(|x| x.1)
    }
}

/// What [`NodeCounts::into_rows`] can fail on.
#[derive(Debug, thiserror::Error)]
pub enum OccupancyRowsError {
    #[error("{0}")]
    Exceeds(String),
    #[error(transparent)]
    Ingest(#[from] IngestError),
    #[error("polars: {0}")]
    Polars(#[from] PolarsError),
}

/// The synthetic rows being built.
#[derive(Default)]
struct Expanded {
    ts: Vec<i64>,
    iv: Vec<i64>,
    samples: Vec<Option<u32>>,
    node: Vec<String>,
    gpu: Vec<u32>,
    uuid: Vec<String>,
    holders: Vec<Option<u32>>,
}

impl Expanded {
    fn into_frame(self) -> Result<DataFrame, PolarsError> {
        let h = self.ts.len();
        let mut given: Vec<(&str, Column)> = vec![
            ("ts", Column::new("ts".into(), self.ts)),
            ("interval_ms", Column::new("interval_ms".into(), self.iv)),
            ("node", Column::new("node".into(), self.node)),
            ("gpu", Column::new("gpu".into(), self.gpu)),
            ("uuid", Column::new("uuid".into(), self.uuid)),
            ("samples", Column::new("samples".into(), self.samples)),
            ("holders", Column::new("holders".into(), self.holders)),
        ];
        let columns = Table::Gpu
            .columns()
            .iter()
            .map(|c| match given.iter().position(|(n, _)| *n == c.name) {
                Some(k) => given.swap_remove(k).1,
                None => Column::full_null(c.name.into(), h, &c.ty.polars()),
            })
            .collect();
        DataFrame::new(h, columns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> RowSpec {
        RowSpec {
            grid_ms: 1,
            requested_ms: None,
            fallback_ms: 900_000.0,
        }
    }

    #[test]
    fn each_row_becomes_one_row_per_gpu_held_first() {
        let mut c = NodeCounts::default();
        // Node a: 4 GPUs (given once, after its first counts), every 15 min: 0, 1, 3, 4 held.
        for (k, v) in [0.0, 1.0, 3.0, 4.0].into_iter().enumerate() {
            c.add_allocated("a", (k as i64 + 1) * 900_000, 1, Some(v), k as u64 + 2);
        }
        c.add_total("a", 1_800_000, 4.0, 9);
        // Node b: 2 GPUs, then 3 from the third row on; one count missing (null).
        for (k, v) in [Some(2.0), None, Some(3.0)].into_iter().enumerate() {
            c.add_allocated("b", (k as i64 + 1) * 900_000, 1, v, 20 + k as u64);
        }
        c.add_total("b", 0, 2.0, 30);
        c.add_total("b", 2_700_000, 3.0, 31);
        c.check().expect("consistent");
        let (df, s) = c.into_rows(spec(), "csv:x node").expect("rows");
        assert_eq!(s.rows.get(&900_000), Some(&2));
        assert_eq!(df.height(), 4 * 4 + (2 + 2 + 3));
        assert_eq!(
            df.get_column_names()
                .iter()
                .map(|c| c.as_str())
                .collect::<Vec<_>>(),
            Table::Gpu
                .columns()
                .iter()
                .map(|c| c.name)
                .collect::<Vec<_>>()
        );
        let a2 = df
            .clone()
            .lazy()
            .filter(col("uuid").eq(lit("a/gpu-2")))
            .collect()
            .unwrap();
        let held: Vec<Option<u32>> = a2
            .column("holders")
            .unwrap()
            .u32()
            .unwrap()
            .iter()
            .collect();
        assert_eq!(held, [Some(0), Some(0), Some(1), Some(1)]);
        assert_eq!(a2.column("gpu").unwrap().u32().unwrap().get(0), Some(2));
        assert_eq!(a2.column("node").unwrap().str().unwrap().get(0), Some("a"));
        assert_eq!(a2.column("model").unwrap().null_count(), 4);
        assert_eq!(a2.column("memory_used_max_bytes").unwrap().null_count(), 4);
        let iv = a2.column("interval_ms").unwrap().i64().unwrap();
        assert!(iv.into_no_null_iter().all(|x| x == 900_000));
        let b2 = df
            .clone()
            .lazy()
            .filter(col("uuid").eq(lit("b/gpu-2")))
            .collect()
            .unwrap();
        assert_eq!(b2.height(), 1, "b's third GPU exists from the third row");
        assert_eq!(b2.column("holders").unwrap().u32().unwrap().get(0), Some(1));
        let b0 = df
            .lazy()
            .filter(col("uuid").eq(lit("b/gpu-0")))
            .collect()
            .unwrap();
        let held: Vec<Option<u32>> = b0
            .column("holders")
            .unwrap()
            .u32()
            .unwrap()
            .iter()
            .collect();
        assert_eq!(
            held,
            [Some(1), None, Some(1)],
            "no count: unknown, not free"
        );
    }

    #[test]
    fn missing_totals_and_too_many_allocated_are_errors_with_lines() {
        let mut c = NodeCounts::default();
        c.add_allocated("a", 900_000, 1, Some(1.0), 2);
        c.add_allocated("b", 900_000, 1, Some(1.0), 3);
        c.add_total("a", 0, 8.0, 4);
        let e = c.check().unwrap_err();
        assert_eq!(e.line, 3);
        assert!(
            e.reason
                .contains("\"b\" has gpus_allocated but no gpus_total"),
            "{e}"
        );
        c.add_total("b", 0, 8.0, 5);
        c.add_total("a", 1_800_000, 2.0, 6);
        c.add_allocated("a", 1_800_000, 1, Some(3.0), 7);
        let e = c.check().unwrap_err();
        assert_eq!(e.line, 7);
        assert!(
            e.reason.contains("gpus_allocated 3 exceeds gpus_total 2"),
            "{e}"
        );
        // Dropping the node with the bad count leaves b, consistent.
        let dropped = c.drop_nodes(&["a", "zz"].into_iter().collect());
        assert_eq!(dropped, ["a"]);
        c.check().expect("b alone is consistent");
        let (df, _) = c.into_rows(spec(), "x").expect("rows");
        assert_eq!(df.height(), 8);
    }
}
