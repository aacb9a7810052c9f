//! The off-peak profile (module docs of [`super`]): one slot per local hour of the week (or of
//! the day), f per slot, the baseline (per model too), the lowest level's windows and the tiers.
//!
//! Pure over the merged [`FreeGpus`]. This module does not group windows into schedule lines
//! (that is `schedule`) or make findings.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Datelike, Timelike, Utc};
use serde::Serialize;

use super::free::FreeGpus;
use super::{DAYS, MAX_TIERS, MinGpus};
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

/// A tier: a level of free GPUs above the baseline and the windows that reach it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Tier {
    /// L: free GPUs in every hour of its windows (baseline included).
    pub free_gpus: u32,
    /// L − baseline.
    pub above_baseline: u32,
    /// Σ window hours × `above_baseline`, per week (day).
    pub gpu_hours: u64,
    pub windows: Vec<Window>,
}

/// The profile, its baseline, windows and tiers.
#[derive(Debug, Clone, Serialize)]
pub struct Profile {
    /// `week` or `day`.
    pub period: &'static str,
    /// K in GPUs.
    pub k: u32,
    pub gpus_observed: usize,
    pub slots: Vec<Slot>,
    pub baseline: Baseline,
    /// Every run of ≥ `min_hours` with ≥ baseline + K GPUs free (the lowest level's windows):
    /// the off-peak time as a whole, which the MIG planner's night schedule uses.
    pub windows: Vec<Window>,
    /// The reported tiers, lowest level first.
    pub tiers: Vec<Tier>,
    /// Tiers left out by the [`MAX_TIERS`] cap.
    pub tiers_left_out: Vec<Tier>,
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

/// Builds the profile, the baseline, the windows and the tiers (pure; `free` from
/// [`free_gpus_per_hour`](super::free::free_gpus_per_hour)).
pub fn profile(free: &FreeGpus, params: &Params) -> Profile {
    let p = &params.offpeak;
    let tz = params.tz;
    let gpus = free.gpus_observed();
    let k = match p.min_gpus {
        MinGpus::Count(n) => n,
        MinGpus::Share(s) => ((gpus as f64 * s).ceil() as u32).max(1),
    };
    let span_h = match (
        free.per_hour.keys().next(),
        free.per_hour.keys().next_back(),
    ) {
        (Some(a), Some(b)) => b - a + 1,
        _ => 0,
    };
    let weekly = span_h >= 14 * 24;
    let nslots = if weekly { 168 } else { 24 };
    // slot -> period -> (free, per model)
    type Obs<'a> = BTreeMap<i64, (u32, &'a BTreeMap<String, u32>)>;
    let mut obs: Vec<Obs> = vec![BTreeMap::new(); nslots];
    for (&h, models) in &free.per_hour {
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
    let models: BTreeSet<&String> = free
        .gpus
        .keys()
        .chain(free.per_hour.values().flat_map(|m| m.keys()))
        .collect();
    // Sorted free counts per slot.
    let sorted: Vec<Vec<u32>> = obs
        .iter()
        .map(|m| {
            let mut v: Vec<u32> = m.values().map(|(f, _)| *f).collect();
            v.sort_unstable();
            v
        })
        .collect();
    let mut slots: Vec<Slot> = obs
        .iter()
        .zip(&sorted)
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
                    let f = at_share(&mv, p.min_share);
                    (f > 0).then(|| (model.clone(), f))
                })
                .collect();
            Slot {
                label: slot_label(i, weekly),
                observations: n,
                share: 0.0,
                free_at_p: at_share(v, p.min_share),
                free_median,
                free_at_p_by_model,
            }
        })
        .collect();
    let observed: Vec<usize> = (0..nslots).filter(|&i| slots[i].observations > 0).collect();
    let base = observed
        .iter()
        .map(|&i| slots[i].free_at_p)
        .min()
        .unwrap_or(0);
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
    let share_at = |i: usize, level: u32| -> f64 {
        let v = &sorted[i];
        if v.is_empty() {
            0.0
        } else {
            v.iter().filter(|&&x| x >= level).count() as f64 / v.len() as f64
        }
    };
    for (i, s) in slots.iter_mut().enumerate() {
        s.share = share_at(i, base + k);
    }
    let make = |start: usize, len: usize| {
        let expected = (start..start + len)
            .map(|i| slots[i % nslots].free_at_p)
            .min()
            .unwrap_or(0);
        Window {
            start_slot: start % nslots,
            hours: len as u32,
            expected_free_gpus: expected,
            above_baseline: expected.saturating_sub(base),
            confidence: (start..start + len)
                .map(|i| share_at(i % nslots, expected))
                .fold(1.0, f64::min),
        }
    };
    // Levels, ascending, and their windows.
    let levels: BTreeSet<u32> = observed
        .iter()
        .map(|&i| slots[i].free_at_p)
        .filter(|&f| f >= base + k)
        .collect();
    let per_level: Vec<(u32, Vec<(usize, usize)>)> = levels
        .iter()
        .map(|&l| {
            let ok: Vec<bool> = slots
                .iter()
                .map(|s| s.observations > 0 && s.free_at_p >= l)
                .collect();
            (l, runs(&ok, p.min_hours as usize))
        })
        .filter(|(_, w)| !w.is_empty())
        .collect();
    let windows: Vec<Window> = per_level
        .first()
        .map(|(_, w)| w.iter().map(|&(s, l)| make(s, l)).collect())
        .unwrap_or_default();
    let mut tiers: Vec<Tier> = Vec::new();
    for (i, (level, ws)) in per_level.iter().enumerate() {
        let higher = per_level
            .get(i + 1)
            .map(|(_, w)| w.as_slice())
            .unwrap_or(&[]);
        let covered: BTreeSet<usize> = higher
            .iter()
            .flat_map(|&(s, l)| (s..s + l).map(|i| i % nslots))
            .collect();
        // A window the next level keeps as it is belongs to that level; one that extends the
        // next level's windows (which give more GPUs) by less than `min_hours` is left out too.
        let new: Vec<Window> = ws
            .iter()
            .filter(|w| !higher.contains(w))
            .filter(|&&(s, l)| {
                (s..s + l)
                    .filter(|i| !covered.contains(&(i % nslots)))
                    .count()
                    >= (p.min_hours as usize).max(1)
            })
            .map(|&(s, l)| make(s, l))
            .collect();
        if new.is_empty() {
            continue;
        }
        let above = level - base;
        tiers.push(Tier {
            free_gpus: *level,
            above_baseline: above,
            gpu_hours: new
                .iter()
                .map(|w| u64::from(w.hours) * u64::from(above))
                .sum(),
            windows: new,
        });
    }
    // Keep the tiers adding the most GPU-hours (ties: the higher level), lowest level first.
    tiers.sort_by(|a, b| {
        b.gpu_hours
            .cmp(&a.gpu_hours)
            .then(b.free_gpus.cmp(&a.free_gpus))
    });
    let mut tiers_left_out = tiers.split_off(tiers.len().min(MAX_TIERS));
    tiers.sort_by_key(|t| t.free_gpus);
    tiers_left_out.sort_by_key(|t| t.free_gpus);
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
        tiers,
        tiers_left_out,
    }
}

fn slot_label(slot: usize, weekly: bool) -> String {
    if weekly {
        format!("{} {:02}:00", DAYS[(slot / 24) % 7], slot % 24)
    } else {
        format!("{:02}:00", slot % 24)
    }
}
