//! The off-peak profile (module docs of [`super`]): one slot per local hour of the week (or of
//! the day) over the observed hours, f per slot, the baseline (per model too), and the windows:
//! every run with ≥ B + K GPUs free at its full length and its own level, with its peak.
//!
//! Pure over the merged [`FreeGpus`]. This module does not group windows into schedule lines or
//! choose which become findings (that is `schedule`), or make findings.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Datelike, Timelike, Utc};
use chrono_tz::Tz;
use serde::Serialize;

use super::free::FreeGpus;
use super::{DAYS, MinGpus};
use crate::advisor::Params;
use crate::advisor::evidence::ModelGpus;

/// One slot of the profile (an hour of the week, or of the day).
#[derive(Debug, Clone, Serialize)]
pub struct Slot {
    /// `Mon 20:00` (weekly) or `20:00` (daily), local time.
    pub label: String,
    /// Observed weeks (days) with data in this slot.
    pub observations: usize,
    /// Share of observations with ≥ baseline + K GPUs free.
    pub share: f64,
    /// f: free GPUs reached in at least P of the observations.
    pub free_at_p: u32,
    /// Median free GPUs.
    pub free_median: f64,
    /// f per GPU model (each model on its own); models with none free are left out.
    #[serde(skip)]
    pub free_at_p_by_model: BTreeMap<String, u32>,
}

/// A window found in the profile.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Window {
    /// First slot (0 = Monday 00:00 local, or 00:00 in daily mode) and length in hours.
    pub start_slot: usize,
    pub hours: u32,
    /// Free GPUs reached in ≥ P of observations in every hour of the window (baseline included).
    pub expected_free_gpus: u32,
    /// `expected_free_gpus` − the baseline.
    pub above_baseline: u32,
    /// Lowest share of observations with ≥ `expected_free_gpus` free over the window's hours.
    pub confidence: f64,
    /// The part of the window where ≥ K more GPUs are free than over the whole of it, for ≥
    /// `min_hours` (the one adding the most GPU-hours), when there is one.
    pub peak: Option<Peak>,
}

/// A peak inside a window: a run of ≥ `min_hours` with at least K more GPUs free than the
/// window's level.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Peak {
    /// First slot and length in hours.
    pub start_slot: usize,
    pub hours: u32,
    /// Free GPUs reached in ≥ P of observations in every hour of the peak (baseline included).
    pub expected_free_gpus: u32,
    /// Lowest share of observations with ≥ `expected_free_gpus` free over its hours.
    pub confidence: f64,
}

/// Capacity free at every observed hour: over-provisioning.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Baseline {
    /// B: the least f over the observed slots.
    pub gpus: u32,
    /// Per model (most first); see [`Baseline::unattributed`] for how it adds up.
    pub by_model: Vec<ModelGpus>,
}

impl Baseline {
    /// GPUs of the baseline that no single model accounts for at every hour (which GPUs are
    /// free varies), when the models' own baselines add up to less than B.
    pub fn unattributed(&self) -> u32 {
        self.gpus
            .saturating_sub(self.by_model.iter().map(|m| m.gpus).sum())
    }

    /// `1 × NVIDIA H100 80GB HBM3, 1 × NVIDIA A100-SXM4-80GB` (plus GPUs whose model varies, or
    /// a caveat when the models' own baselines are not all free at once).
    pub fn models_text(&self) -> String {
        let mut parts: Vec<String> = self
            .by_model
            .iter()
            .map(|m| format!("{} × {}", m.gpus, m.model))
            .collect();
        let sum: u32 = self.by_model.iter().map(|m| m.gpus).sum();
        if self.unattributed() > 0 {
            parts.push(format!(
                "{} whose model varies by hour",
                self.unattributed()
            ));
        }
        let list = parts.join(", ");
        if sum > self.gpus {
            format!("each model on its own: {list}, not all at once")
        } else {
            list
        }
    }
}

/// The profile, its baseline and windows.
#[derive(Debug, Clone, Serialize)]
pub struct Profile {
    /// `week` or `day`.
    pub period: &'static str,
    /// K in GPUs.
    pub k: u32,
    pub gpus_observed: usize,
    pub slots: Vec<Slot>,
    pub baseline: Baseline,
    /// Every run of ≥ `min_hours` with ≥ baseline + K GPUs free, at its full length and the
    /// level that holds over it, by start: the off-peak time as a whole (the MIG planner's
    /// night schedule uses it). Runs never overlap.
    pub windows: Vec<Window>,
    /// Hours with rows that were not observations (their rows cover less than half of them:
    /// the range's edges, fleet-wide gaps), left out of the profile.
    pub hours_unobserved: usize,
}

impl Profile {
    /// Slots in the profile's cycle: 168 (week) or 24 (day).
    pub fn nslots(&self) -> usize {
        if self.period == "week" { 168 } else { 24 }
    }
}

/// The value reached in at least `share` of the sorted observations `v` (0 when empty).
fn at_share(v: &[u32], share: f64) -> u32 {
    let n = v.len();
    if n == 0 {
        return 0;
    }
    let need = ((share * n as f64).ceil() as usize).clamp(1, n);
    v[n - need]
}

/// Cyclic runs of `ok` slots of at least `min_len` (start, length), by start. A run around the
/// whole cycle is not returned (it has no start or end).
fn runs(ok: &[bool], min_len: usize) -> Vec<(usize, usize)> {
    let n = ok.len();
    let Some(first_bad) = ok.iter().position(|&o| !o) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut start: Option<usize> = None;
    // Walk the cycle once starting after a bad slot, so runs wrapping midnight/Sunday join.
    for step in 1..=n {
        let i = first_bad + step;
        if ok[i % n] {
            start.get_or_insert(i);
        } else if let Some(s) = start.take()
            && i - s >= min_len.max(1)
        {
            out.push((s % n, i - s));
        }
    }
    out.sort_unstable();
    out
}

/// Per slot, per period (day or week): the free GPUs in total and per model.
type Obs<'a> = BTreeMap<i64, (u32, &'a BTreeMap<String, u32>)>;

/// The observed hours by slot of the local hour of the week (`weekly`) or of the day, and by
/// period; a DST fall-back's repeated hour keeps its lower count (conservative).
fn observations_by_slot<'a>(
    hours: &[(i64, &'a BTreeMap<String, u32>)],
    tz: Tz,
    weekly: bool,
) -> Vec<Obs<'a>> {
    let nslots = if weekly { 168 } else { 24 };
    let mut obs: Vec<Obs> = vec![BTreeMap::new(); nslots];
    for &(h, models) in hours {
        let Some(t) = DateTime::<Utc>::from_timestamp(h * 3600, 0) else {
            continue;
        };
        let total: u32 = models.values().sum();
        let local = t.with_timezone(&tz);
        let date = local.date_naive();
        let dow = local.weekday().num_days_from_monday() as usize;
        let hr = local.hour() as usize;
        let (slot, period) = if weekly {
            let monday = date - chrono::Days::new(dow as u64);
            (dow * 24 + hr, i64::from(monday.num_days_from_ce()))
        } else {
            (hr, i64::from(date.num_days_from_ce()))
        };
        // DST fall-back repeats an hour: keep the lower count (conservative).
        let e = obs[slot].entry(period).or_insert((total, models));
        if total < e.0 {
            *e = (total, models);
        }
    }
    obs
}

/// Each slot's figures from its observations (`sorted`: its free counts in order): the free
/// GPUs at the `min_share` quantile, in total and per model of `models`, and the median.
fn slot_stats(
    obs: &[Obs],
    sorted: &[Vec<u32>],
    models: &BTreeSet<&String>,
    min_share: f64,
    weekly: bool,
) -> Vec<Slot> {
    obs.iter()
        .zip(sorted)
        .enumerate()
        .map(|(i, (m, v))| {
            let n = v.len();
            let free_median = if n == 0 {
                0.0
            } else if n % 2 == 1 {
                f64::from(v[n / 2])
            } else {
                (f64::from(v[n / 2 - 1]) + f64::from(v[n / 2])) / 2.0
            };
            let free_at_p_by_model = models
                .iter()
                .filter_map(|&model| {
                    let mut mv: Vec<u32> = m
                        .values()
                        .map(|(_, per)| per.get(model).copied().unwrap_or(0))
                        .collect();
                    mv.sort_unstable();
                    let f = at_share(&mv, min_share);
                    (f > 0).then(|| (model.clone(), f))
                })
                .collect();
            Slot {
                label: slot_label(i, weekly),
                observations: n,
                share: 0.0,
                free_at_p: at_share(v, min_share),
                free_median,
                free_at_p_by_model,
            }
        })
        .collect()
}

/// The baseline per model: the GPUs of each model free in every observed slot (models with
/// none left out), most first.
fn baseline_by_model(
    models: &BTreeSet<&String>,
    observed: &[usize],
    slots: &[Slot],
    free: &FreeGpus,
) -> Vec<ModelGpus> {
    let mut by_model: Vec<ModelGpus> = models
        .iter()
        .map(|&m| ModelGpus {
            model: m.clone(),
            gpus: observed
                .iter()
                .map(|&i| slots[i].free_at_p_by_model.get(m).copied().unwrap_or(0))
                .min()
                .unwrap_or(0),
            gpus_observed: free.gpus.get(m).copied().unwrap_or(0),
        })
        .filter(|m| m.gpus > 0)
        .collect();
    by_model.sort_by(|a, b| b.gpus.cmp(&a.gpus).then_with(|| a.model.cmp(&b.model)));
    by_model
}

/// Among the runs of `f` (no wrap) with ≥ `k` more GPUs free than `level` for ≥ `min_len`
/// slots, the one adding the most GPU-hours beyond `level` (ties: more GPUs, then the earlier
/// one): (score, its level, start, length).
fn best_run(f: &[u32], level: u32, k: u32, min_len: usize) -> Option<(u64, u32, usize, usize)> {
    let mut best: Option<(u64, u32, usize, usize)> = None;
    let candidates: BTreeSet<u32> = f.iter().copied().filter(|&x| x >= level + k).collect();
    for &l in &candidates {
        let mut i = 0;
        while i < f.len() {
            if f[i] < l {
                i += 1;
                continue;
            }
            let j = (i..f.len()).find(|&j| f[j] < l).unwrap_or(f.len());
            if j - i >= min_len {
                let lv = f[i..j].iter().copied().min().unwrap_or(l);
                let score = (j - i) as u64 * u64::from(lv - level);
                let better = match best {
                    None => true,
                    Some((bs, bl, ..)) => score > bs || (score == bs && lv > bl),
                };
                if better {
                    best = Some((score, lv, i, j - i));
                }
            }
            i = j;
        }
    }
    best
}

/// The hours observed, with their free GPUs per model: only hours whose rows cover at least half
/// of them are observations.
fn observed_hours(free: &FreeGpus) -> Vec<(i64, &BTreeMap<String, u32>)> {
    free.per_hour
        .iter()
        .filter(|(h, _)| free.observed(**h))
        .map(|(&h, m)| (h, m))
        .collect()
}

/// Each slot's free counts, in order.
fn sorted_free(obs: &[Obs]) -> Vec<Vec<u32>> {
    obs.iter()
        .map(|m| {
            let mut v: Vec<u32> = m.values().map(|(f, _)| *f).collect();
            v.sort_unstable();
            v
        })
        .collect()
}

/// The share of a slot's observations (`sorted`) with at least `level` GPUs free; 0 without any.
fn share_at_level(sorted: &[u32], level: u32) -> f64 {
    if sorted.is_empty() {
        0.0
    } else {
        sorted.iter().filter(|&&x| x >= level).count() as f64 / sorted.len() as f64
    }
}

/// Builds the profile, the baseline, the windows and the tiers (pure; `free` from
/// [`free_gpus_per_hour`](super::free::free_gpus_per_hour)).
pub fn profile(free: &FreeGpus, params: &Params) -> Profile {
    let p = &params.offpeak;
    let gpus = free.gpus_observed();
    let k = match p.min_gpus {
        MinGpus::Count(n) => n,
        MinGpus::Share(s) => ((gpus as f64 * s).ceil() as u32).max(1),
    };
    let hours = observed_hours(free);
    let hours_unobserved = free.cover.keys().filter(|h| !free.observed(**h)).count();
    let span_h = match (hours.first(), hours.last()) {
        (Some(a), Some(b)) => b.0 - a.0 + 1,
        _ => 0,
    };
    let weekly = span_h >= 14 * 24;
    let nslots = if weekly { 168 } else { 24 };
    let obs = observations_by_slot(&hours, params.tz, weekly);
    let models: BTreeSet<&String> = free
        .gpus
        .keys()
        .chain(free.per_hour.values().flat_map(|m| m.keys()))
        .collect();
    let sorted = sorted_free(&obs);
    let mut slots = slot_stats(&obs, &sorted, &models, p.min_share, weekly);
    let observed: Vec<usize> = (0..nslots).filter(|&i| slots[i].observations > 0).collect();
    let base = observed
        .iter()
        .map(|&i| slots[i].free_at_p)
        .min()
        .unwrap_or(0);
    let by_model = baseline_by_model(&models, &observed, &slots, free);
    let share_at = |i: usize, level: u32| share_at_level(&sorted[i], level);
    for (i, s) in slots.iter_mut().enumerate() {
        s.share = share_at(i, base + k);
    }
    let level_of = |start: usize, len: usize| {
        (start..start + len)
            .map(|i| slots[i % nslots].free_at_p)
            .min()
            .unwrap_or(0)
    };
    let confidence_of = |start: usize, len: usize, level: u32| {
        (start..start + len)
            .map(|i| share_at(i % nslots, level))
            .fold(1.0, f64::min)
    };
    let min_len = (p.min_hours as usize).max(1);
    // The peak of a window: among the runs inside it (no wrap beyond its ends) with ≥ K more
    // GPUs free than its level, for ≥ min_hours, the one adding the most GPU-hours beyond the
    // window's level (ties: more GPUs, then the earlier one).
    let peak_of = |start: usize, len: usize, level: u32| -> Option<Peak> {
        let f: Vec<u32> = (start..start + len)
            .map(|i| slots[i % nslots].free_at_p)
            .collect();
        let best = best_run(&f, level, k, min_len);
        best.map(|(_, lv, i, n)| Peak {
            start_slot: (start + i) % nslots,
            hours: n as u32,
            expected_free_gpus: lv,
            confidence: confidence_of(start + i, n, lv),
        })
    };
    let make = |start: usize, len: usize| {
        let expected = level_of(start, len);
        Window {
            start_slot: start % nslots,
            hours: len as u32,
            expected_free_gpus: expected,
            above_baseline: expected.saturating_sub(base),
            confidence: confidence_of(start, len, expected),
            peak: peak_of(start, len, expected),
        }
    };
    // The windows: every run of observed slots with ≥ B + K free, whole.
    let ok: Vec<bool> = slots
        .iter()
        .map(|s| s.observations > 0 && s.free_at_p >= base + k)
        .collect();
    let windows: Vec<Window> = runs(&ok, min_len)
        .into_iter()
        .map(|(s, l)| make(s, l))
        .collect();
    Profile {
        period: if weekly { "week" } else { "day" },
        k,
        gpus_observed: gpus,
        slots,
        baseline: Baseline {
            gpus: base,
            by_model,
        },
        windows,
        hours_unobserved,
    }
}

fn slot_label(slot: usize, weekly: bool) -> String {
    if weekly {
        format!("{} {:02}:00", DAYS[(slot / 24) % 7], slot % 24)
    } else {
        format!("{:02}:00", slot % 24)
    }
}
