//! One usage group being summed row by row in report order (fleet, previous period, node, model):
//! GPU-hours observed, busy and allocated, activity, memory, energy, peak and the quantile's
//! values. Pure.

use std::collections::BTreeSet;

use super::hist::{Hist, Values, rounded_quantile};
use super::rows::Row;
use super::{FREE_ACTIVITY, FREE_MEMORY, GIB, HOUR_MS, Prices, Usage, r2, r3};

/// The least memory total a GPU row can have for its used share to count (1 MiB).
const MIN_TOTAL_BYTES: f64 = (1u64 << 20) as f64;
use crate::stats::quantile;

/// A [`Usage`] being summed, row by row in report order.
pub(super) struct UsageAcc {
    pub(super) key: String,
    pub(super) gpus: BTreeSet<usize>,
    /// The GPU of the last row added (rows come GPU by GPU): no set insert for its next rows.
    pub(super) last_gpu: Option<usize>,
    pub(super) observed: f64,
    pub(super) busy: f64,
    pub(super) allocated: f64,
    pub(super) act_w: f64,
    pub(super) act_t: f64,
    /// GPM's tensor and DRAM activity: Σ value × hours and Σ hours of the rows with it.
    pub(super) tensor_w: f64,
    pub(super) tensor_t: f64,
    pub(super) dram_w: f64,
    pub(super) dram_t: f64,
    /// GPUs with tensor or DRAM activity in some row.
    pub(super) gpm_gpus: BTreeSet<usize>,
    /// The GPU last added to `gpm_gpus` (no set insert for its next rows).
    pub(super) last_gpm_gpu: Option<usize>,
    pub(super) mem_share: f64,
    pub(super) mem_n: usize,
    pub(super) energy: Option<f64>,
    pub(super) peak: Option<f64>,
    pub(super) values: Values,
}

impl UsageAcc {
    pub(super) fn new(key: &str, exact: bool) -> UsageAcc {
        UsageAcc {
            key: key.to_string(),
            gpus: BTreeSet::new(),
            last_gpu: None,
            observed: 0.0,
            busy: 0.0,
            allocated: 0.0,
            act_w: 0.0,
            act_t: 0.0,
            tensor_w: 0.0,
            tensor_t: 0.0,
            dram_w: 0.0,
            dram_t: 0.0,
            gpm_gpus: BTreeSet::new(),
            last_gpm_gpu: None,
            mem_share: 0.0,
            mem_n: 0,
            energy: None,
            peak: None,
            values: if exact {
                Values::All(Vec::new())
            } else {
                Values::Hist(Hist::default())
            },
        }
    }

    pub(super) fn add(&mut self, gpu: usize, r: &Row) {
        if self.last_gpu != Some(gpu) {
            self.gpus.insert(gpu);
            self.last_gpu = Some(gpu);
        }
        let h = r.interval as f64 / HOUR_MS;
        self.observed += h;
        if let Some(a) = r.activity() {
            match &mut self.values {
                Values::All(v) => v.push(a),
                Values::Hist(hist) => hist.add(a),
            }
            self.act_w += a * h;
            self.act_t += h;
            self.busy += a * h;
        }
        if let Some(t) = r.tensor() {
            self.tensor_w += t * h;
            self.tensor_t += h;
        }
        if let Some(d) = r.dram() {
            self.dram_w += d * h;
            self.dram_t += h;
        }
        if (r.tensor().is_some() || r.dram().is_some()) && self.last_gpm_gpu != Some(gpu) {
            self.gpm_gpus.insert(gpu);
            self.last_gpm_gpu = Some(gpu);
        }
        let held = r.mem().is_some_and(|m| m >= FREE_MEMORY);
        if held || r.activity().is_some_and(|a| a > FREE_ACTIVITY) {
            self.allocated += h;
        }
        // The share only from rows where it can be one: a total of at least 1 MiB (no GPU has
        // less) and no more used than the total; others would print "100% used, peak 0.0 GiB".
        if let (Some(m), Some(t)) = (r.mem(), r.total())
            && t >= MIN_TOTAL_BYTES
            && m <= t
        {
            self.mem_share += m / t;
            self.mem_n += 1;
        }
        if let Some(m) = r.mem() {
            self.peak = Some(self.peak.map_or(m, |p: f64| p.max(m)));
        }
        if let Some(e) = r.energy_j() {
            *self.energy.get_or_insert(0.0) += e;
        }
    }

    /// The quantile, or the histogram bucket a second pass must read.
    pub(super) fn p95(&mut self) -> Result<Option<f64>, (usize, u64)> {
        match &mut self.values {
            Values::All(v) => Ok(quantile(v, 0.95).map(r3)),
            Values::Hist(h) => rounded_quantile(h, 0.95),
        }
    }

    pub(super) fn finish(self, p95: Option<f64>, hours: f64, prices: &Prices) -> Usage {
        let mut u = Usage {
            key: self.key,
            ..Usage::default()
        };
        u.gpus = self.gpus.len();
        u.gpu_hours_available = r3(u.gpus as f64 * hours);
        u.gpu_hours_observed = r3(self.observed);
        u.gpu_hours_allocated = r3(self.allocated);
        u.gpu_hours_busy = (self.act_t > 0.0).then(|| r3(self.busy));
        u.activity_mean = (self.act_t > 0.0).then(|| r3(self.act_w / self.act_t));
        u.activity_p95 = p95;
        u.tensor_active_mean = (self.tensor_t > 0.0).then(|| r3(self.tensor_w / self.tensor_t));
        u.dram_active_mean = (self.dram_t > 0.0).then(|| r3(self.dram_w / self.dram_t));
        u.gpm_gpus = (!self.gpm_gpus.is_empty()).then_some(self.gpm_gpus.len());
        u.memory_used_share = (self.mem_n > 0).then(|| r3(self.mem_share / self.mem_n as f64));
        u.memory_peak_gib = self.peak.map(|p| r3(p / GIB));
        u.energy_kwh = self.energy.map(|j| r3(j / 3.6e6));
        u.cost_gpu_hours = r2(u.gpu_hours_available * prices.gpu_hour);
        u.cost_energy = u.energy_kwh.map(|e| r2(e * prices.kwh));
        u.cost_total = r2(u.cost_gpu_hours + u.cost_energy.unwrap_or(0.0));
        u
    }
}

// ---- teams ----------------------------------------------------------------------------------
