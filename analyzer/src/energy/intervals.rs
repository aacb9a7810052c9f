//! A partition's GPU intervals ([`GpuIntervals`]): each GPU (node, uuid, index, model) with its
//! intervals' `ts` in order, and per interval its energy and activity, GPU by GPU. Made from rows
//! the caller walks ([`IntervalsBuilder`]: the report's tallies, and [`super::frames`] from the
//! GPU table); [`Gpus`] finds a MIG or process row's interval. It reads no frames and splits
//! nothing.

use tessera_core::mig::GpuModel;
use tessera_core::mig::profiles::model_by_nvml_name;

use crate::frames::columns::{DirectCache, FastMap, cache_slot, cache_word as word, find_from};

/// A GPU as its rows name it: node and uuid (ids of the GPU table's strings), GPU index.
pub(super) type GpuKey = (Option<u32>, Option<u32>, Option<i64>);

/// The GPUs of a partition's GPU rows, each with its intervals' `ts` in order.
#[derive(Default)]
pub(super) struct Gpus {
    pub(super) keys: Vec<GpuKey>,
    index: FastMap<GpuKey, usize>,
    cache: DirectCache<GpuKey, usize>,
    /// Per GPU: its intervals' `ts`, ascending (distinct), where its intervals start in the
    /// partition's order, and where its last match was.
    ts: Vec<Vec<i64>>,
    first: Vec<usize>,
    cursor: Vec<usize>,
}

impl Gpus {
    /// The GPU with key `k` (added when `add`; else `None` when there is none).
    pub(super) fn of(&mut self, k: GpuKey, add: bool) -> Option<usize> {
        let slot = cache_slot([word(k.0), word(k.1), word(k.2)]);
        if let Some(g) = self.cache.get(slot, &k) {
            return Some(g);
        }
        let g = match self.index.get(&k) {
            Some(&g) => g,
            None if add => {
                self.keys.push(k);
                self.index.insert(k, self.keys.len() - 1);
                self.keys.len() - 1
            }
            None => return None,
        };
        self.cache.put(slot, k, g);
        Some(g)
    }

    /// The interval of GPU `g` at `ts`, as an index in the partition's order.
    pub(super) fn interval(&mut self, g: usize, ts: i64) -> Option<usize> {
        let at = find_from(&self.ts[g], &mut self.cursor[g], ts)?;
        Some(self.first[g] + at)
    }
}

/// One GPU interval: its GPU (an index into [`GpuIntervals`]' GPUs), its energy J and its
/// activity (NaN: none).
#[derive(Clone, Copy)]
pub(super) struct Iv {
    pub(super) gpu: u32,
    pub(super) energy_j: f64,
    pub(super) activity: f64,
}

/// A partition's GPU intervals, GPU by GPU and each GPU's by `ts`: what [`super::contributions_of`]
/// splits. Made by [`super::contributions`] from the GPU rows, or by an [`IntervalsBuilder`].
#[derive(Default)]
pub struct GpuIntervals {
    pub(super) gpus: Gpus,
    /// The node names and uuids the GPUs' keys number.
    pub(super) nodes: Vec<String>,
    pub(super) uuids: Vec<String>,
    /// Per GPU, its model's profile table (its MIG instances' compute slices).
    pub(super) models: Vec<Option<&'static GpuModel>>,
    pub(super) ivs: Vec<Iv>,
}

/// Builds [`GpuIntervals`] from GPU rows the caller walks: each GPU once ([`gpu`]), in the order
/// the intervals are to come, then its rows in ascending `ts` ([`row`]). A row whose energy is
/// unknown (or not a finite number ≥ 0) is not an interval; of rows with the same `ts`, the
/// first with a known energy is. A GPU given a second time gets no rows.
///
/// [`gpu`]: IntervalsBuilder::gpu
/// [`row`]: IntervalsBuilder::row
#[derive(Default)]
pub struct IntervalsBuilder {
    out: GpuIntervals,
    node_ids: FastMap<String, u32>,
    uuid_ids: FastMap<String, u32>,
    /// The GPU whose rows come now, and its last interval's `ts`.
    current: Option<usize>,
    last_ts: Option<i64>,
}

impl IntervalsBuilder {
    /// Room for `n` intervals.
    pub fn with_capacity(n: usize) -> Self {
        let mut b = IntervalsBuilder::default();
        b.out.ivs.reserve(n);
        b
    }

    /// The next GPU: its node, uuid, index and model name (NVML's).
    pub fn gpu(
        &mut self,
        node: Option<&str>,
        uuid: Option<&str>,
        index: Option<i64>,
        model: Option<&str>,
    ) {
        let id = |s: Option<&str>, ids: &mut FastMap<String, u32>, list: &mut Vec<String>| {
            s.map(|s| {
                *ids.entry(s.to_string()).or_insert_with(|| {
                    list.push(s.to_string());
                    (list.len() - 1) as u32
                })
            })
        };
        let o = &mut self.out;
        let k = (
            id(node, &mut self.node_ids, &mut o.nodes),
            id(uuid, &mut self.uuid_ids, &mut o.uuids),
            index,
        );
        self.last_ts = None;
        // A key met before is not a new GPU: its rows are not taken.
        let known = o.gpus.keys.len();
        let g = o.gpus.of(k, true).filter(|&g| g == known);
        self.current = g;
        if g.is_none() {
            return;
        }
        o.gpus.ts.push(Vec::new());
        o.gpus.first.push(o.ivs.len());
        o.gpus.cursor.push(0);
        o.models.push(model.and_then(model_by_nvml_name));
    }

    /// The current GPU's next row: its `ts`, energy J and activity (SM activity, else busy
    /// ratio).
    pub fn row(&mut self, ts: i64, energy_j: Option<f64>, activity: Option<f64>) {
        let (Some(g), Some(e)) = (
            self.current,
            energy_j.filter(|e| e.is_finite() && *e >= 0.0),
        ) else {
            return;
        };
        if self.last_ts.is_some_and(|t| ts <= t) {
            return;
        }
        self.last_ts = Some(ts);
        self.out.gpus.ts[g].push(ts);
        self.out.ivs.push(Iv {
            gpu: g as u32,
            energy_j: e,
            activity: activity.unwrap_or(f64::NAN),
        });
    }

    pub fn finish(self) -> GpuIntervals {
        self.out
    }
}
