//! Off-peak capacity: the fleet's hour-of-week profile of free GPUs, the capacity that is free
//! at every hour (the **baseline**: over-provisioning, reported as its own finding with the GPU
//! models), and the **off-peak windows** in which free capacity rises above that baseline, in
//! tiers, as a schedule in a chosen time zone with cron and systemd `OnCalendar=` lines.
//!
//! A GPU is free in an hour when every row of it in that hour holds less than `free_memory`
//! (nothing loaded beyond the driver's reserve) and shows activity ≤ `max_activity` (SM activity,
//! else busy ratio, judged on the interval max), and its rows cover at least half the hour. Free
//! capacity is counted in whole GPUs (GPU-equivalents) per GPU model: training needs whole GPUs,
//! and a MIG GPU counts only when all of it is free. An hour with no data at all is not an
//! observation.
//!
//! The profile has one slot per local hour of the week (of the day when the data spans less than
//! two weeks). Per slot s, f(s) = the free GPUs reached in ≥ P (`min_share`) of the slot's
//! observations. Then:
//!
//! - **Baseline** B = min of f over the observed slots: GPUs free at every hour in ≥ P of the
//!   observed weeks (days). Per model likewise (b_m = min over slots of the model's own f), so
//!   the finding can name them. It is never a window.
//! - **Levels**: the distinct values L of f with L − B ≥ K (`min_gpus`: a tier must add at least
//!   K GPUs beyond the baseline). The windows of a level are the cyclic runs (across midnight and
//!   the end of the week) of observed slots with f ≥ L lasting ≥ `min_hours`. A slot without
//!   observations ends a run; since f(s) = B somewhere, no run goes around the clock.
//! - **Tiers**: a level is a tier when it has windows that the next higher level does not have
//!   and that add at least `min_hours` hours to the next level's windows; the tier reports just
//!   those (each window once, at the highest level that keeps its exact shape, so its level is
//!   the least f over it; a window only an hour or two longer than the more-GPUs windows inside
//!   it is not worth a schedule line of its own). At most [`MAX_TIERS`] tiers, those adding the
//!   most GPU-hours above the baseline; a note names the others.
//! - The windows of the lowest level (every run with ≥ B + K free) are the profile's
//!   [`Profile::windows`], which the MIG planner's night schedule uses.
//!
//! Windows of a tier with the same start hour and length on several days are grouped into one
//! [`ScheduleEntry`] (one finding) with cron lines (`CRON_TZ=<tz> M H * * DOW`) and systemd
//! `OnCalendar=` expressions for start and stop.
//!
//! Two phases: each partition's partial is its free GPUs per UTC hour and model ([`FreeGpus`]:
//! small, hours × models), added up in `finish`, which builds the profile. Pure: no I/O, no clock.
//! This module does not plan what to run in a window (the MIG planner and schedules do).

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Datelike, Timelike, Utc};
use polars::prelude::*;
use serde::Serialize;
use serde_json::json;

use super::columns::{self, ts_ms};
use super::{
    AdvisorError, Detector, DetectorOutput, Entity, Finding, Params, Partial, Severity, finding_id,
    unbox,
};
use crate::ingest::Frames;

const HOUR_MS: i64 = 3_600_000;
const DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
/// The model name of GPUs whose `model` is unknown (null).
pub const UNKNOWN_MODEL: &str = "unknown model";
/// Most tiers reported (those adding the most GPU-hours above the baseline).
pub const MAX_TIERS: usize = 3;

/// K: how many GPUs a window needs free beyond the baseline.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MinGpus {
    Count(u32),
    /// A share of the GPUs observed (0–1), rounded up, at least 1.
    Share(f64),
}

impl std::str::FromStr for MinGpus {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad =
            || format!("bad GPU count {s:?}: expected a number (4) or a share of the fleet (10%)");
        if let Some(p) = s.strip_suffix('%') {
            let v: f64 = p.trim().parse().map_err(|_| bad())?;
            if !(v > 0.0 && v <= 100.0) {
                return Err(bad());
            }
            Ok(MinGpus::Share(v / 100.0))
        } else {
            let v: u32 = s.trim().parse().map_err(|_| bad())?;
            if v == 0 {
                return Err(bad());
            }
            Ok(MinGpus::Count(v))
        }
    }
}

/// Thresholds (flags `--offpeak.*`).
#[derive(Debug, Clone)]
pub struct OffpeakParams {
    /// K: GPUs a tier adds beyond the baseline (default 10% of the GPUs observed).
    pub min_gpus: MinGpus,
    /// P: share of observed weeks (or days) in which the GPUs must be free (default 0.9).
    pub min_share: f64,
    /// Shortest window, hours (default 4).
    pub min_hours: u32,
    /// Memory below which a GPU counts as empty, bytes (default 1 GiB).
    pub free_memory_bytes: f64,
    /// Highest activity of a free GPU (default 0.05).
    pub max_activity: f64,
}

impl Default for OffpeakParams {
    fn default() -> Self {
        OffpeakParams {
            min_gpus: MinGpus::Share(0.1),
            min_share: 0.9,
            min_hours: 4,
            free_memory_bytes: (1u64 << 30) as f64,
            max_activity: 0.05,
        }
    }
}

/// The off-peak window detector.
pub struct OffPeak;

/// Free GPUs per UTC hour and GPU model, and the GPUs observed per model: one partition's
/// partial, or the fleet's once merged (partitions hold disjoint GPUs, so counts add up).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FreeGpus {
    /// Hour index since the epoch (UTC) → model → free GPUs of that model. Every hour in which
    /// some GPU has rows is present; models with no free GPU in it may be absent.
    pub per_hour: BTreeMap<i64, BTreeMap<String, u32>>,
    /// Model → GPUs observed.
    pub gpus: BTreeMap<String, usize>,
}

impl FreeGpus {
    /// Adds another partition's counts.
    pub fn merge(&mut self, other: FreeGpus) {
        for (h, models) in other.per_hour {
            let e = self.per_hour.entry(h).or_default();
            for (m, f) in models {
                *e.entry(m).or_default() += f;
            }
        }
        for (m, g) in other.gpus {
            *self.gpus.entry(m).or_default() += g;
        }
    }

    /// GPUs observed, all models.
    pub fn gpus_observed(&self) -> usize {
        self.gpus.values().sum()
    }

    /// Free GPUs per hour, all models.
    pub fn totals(&self) -> BTreeMap<i64, u32> {
        self.per_hour
            .iter()
            .map(|(&h, m)| (h, m.values().sum()))
            .collect()
    }
}

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

/// GPUs of one model in the baseline.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ModelGpus {
    pub model: String,
    /// Free at every observed hour in ≥ P of the observations (this model on its own).
    pub gpus: u32,
    /// GPUs of this model observed.
    pub gpus_observed: usize,
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

/// Free GPUs per UTC hour and model, and the GPUs seen per model.
pub fn free_gpus_per_hour(frames: &Frames, p: &OffpeakParams) -> Result<FreeGpus, AdvisorError> {
    let act = when(col("sm_active_max").is_not_null())
        .then(col("sm_active_max"))
        .otherwise(col("busy_max"));
    let free = col("memory_used_max_bytes")
        .cast(DataType::Float64)
        .lt(lit(p.free_memory_bytes))
        .and(act.clone().is_null().or(act.lt_eq(lit(p.max_activity))))
        .fill_null(lit(false));
    // One row per GPU and hour: small (GPUs × hours), so it is collected once.
    let per_gpu = frames
        .gpu
        .clone()
        .select([
            col("node"),
            col("uuid"),
            col("model").cast(DataType::String),
            // ts > 0, so truncation is floor.
            ((ts_ms() - lit(1i64)).cast(DataType::Float64) / lit(HOUR_MS as f64))
                .cast(DataType::Int64)
                .alias("hour"),
            col("interval_ms").cast(DataType::Int64),
            free.cast(DataType::Int32).alias("free"),
        ])
        .group_by([col("node"), col("uuid"), col("hour")])
        .agg([
            col("free").min().alias("all_free"),
            col("interval_ms").sum().alias("covered"),
            col("model").drop_nulls().first().alias("model"),
        ])
        // A GPU's model: its first known one, in every hour.
        .with_column(
            col("model")
                .drop_nulls()
                .first()
                .over([col("node"), col("uuid")])?
                .fill_null(lit(UNKNOWN_MODEL))
                .alias("model"),
        )
        .collect()?;
    let gpus_df = per_gpu
        .clone()
        .lazy()
        .select([col("node"), col("uuid"), col("model")])
        .unique(None, UniqueKeepStrategy::Any)
        .group_by([col("model")])
        .agg([len().cast(DataType::Int64).alias("gpus")])
        .collect()?;
    let df = per_gpu
        .lazy()
        .with_column(
            col("all_free")
                .eq(lit(1))
                .and(col("covered").gt_eq(lit(HOUR_MS / 2)))
                .cast(DataType::Int64)
                .alias("is_free"),
        )
        .group_by([col("hour"), col("model")])
        .agg([col("is_free").sum().alias("free")])
        .collect()?;
    let mut out = FreeGpus::default();
    let model = columns::strs(&gpus_df, "model")?;
    let count = columns::i64s(&gpus_df, "gpus")?;
    for i in 0..gpus_df.height() {
        if let (Some(m), Some(g)) = (model.get(i), count.get(i)) {
            out.gpus.insert(m.to_string(), g.max(0) as usize);
        }
    }
    let hour = columns::i64s(&df, "hour")?;
    let model = columns::strs(&df, "model")?;
    let freec = columns::i64s(&df, "free")?;
    for i in 0..df.height() {
        if let (Some(h), Some(m), Some(f)) = (hour.get(i), model.get(i), freec.get(i)) {
            let e = out.per_hour.entry(h).or_default();
            if f > 0 {
                e.insert(m.to_string(), f as u32);
            }
        }
    }
    Ok(out)
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
/// [`free_gpus_per_hour`]).
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

/// Cron day-of-week (0 = Sunday) of a weekday index (0 = Monday).
fn cron_dow(day: usize) -> usize {
    (day % 7 + 1) % 7
}

/// Weekday indexes (0 = Monday) as systemd's list: runs of three or more as `Mon..Thu`.
fn systemd_days(days: &BTreeSet<usize>) -> String {
    let mut parts = Vec::new();
    let v: Vec<usize> = days.iter().copied().collect();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        if j - i >= 2 {
            parts.push(format!("{}..{}", DAYS[v[i]], DAYS[v[j]]));
        } else {
            parts.extend(v[i..=j].iter().map(|&d| DAYS[d].to_string()));
        }
        i = j + 1;
    }
    parts.join(",")
}

/// Weekday indexes for people: `Mon–Thu`, `Fri`, `Mon, Wed`.
fn days_label(days: &BTreeSet<usize>) -> String {
    systemd_days(days).replace("..", "–").replace(',', ", ")
}

/// One tier's windows with the same local start hour and length, grouped: one finding.
#[derive(Debug, Clone, Serialize)]
pub struct ScheduleEntry {
    /// 1-based index of the tier in [`Profile::tiers`].
    pub tier: usize,
    /// Days the windows start on (`Mon`…), empty in daily mode (every day).
    pub days: Vec<&'static str>,
    /// Days the windows end on.
    pub end_days: Vec<&'static str>,
    /// `Mon–Thu 19:00–07:00`, `Fri 19:00–Mon 07:00`, `every day 19:00–07:00`.
    pub label: String,
    pub start: String,
    pub end: String,
    pub hours: u32,
    /// The tier's free GPUs (baseline included) and those above the baseline.
    pub expected_free_gpus: u32,
    pub above_baseline: u32,
    pub confidence: f64,
    /// `CRON_TZ=<tz> M H * * DOW` at the start and at the end.
    pub cron_start: String,
    pub cron_end: String,
    /// `OnCalendar=<days> *-*-* HH:MM:00 <tz>` at the start and at the end.
    pub systemd_start: String,
    pub systemd_end: String,
}

/// Groups each tier's windows into schedule entries (tiers lowest level first, then by start).
pub fn schedule(profile: &Profile, tz: &str) -> Vec<ScheduleEntry> {
    let weekly = profile.period == "week";
    let nslots = profile.nslots();
    let mut out = Vec::new();
    for (ti, tier) in profile.tiers.iter().enumerate() {
        let mut groups: BTreeMap<(usize, u32), Vec<&Window>> = BTreeMap::new();
        for w in &tier.windows {
            groups
                .entry((w.start_slot % 24, w.hours))
                .or_default()
                .push(w);
        }
        let mut entries: Vec<(usize, ScheduleEntry)> = Vec::new();
        for ((h0, len), ws) in groups {
            let end_h = (h0 + len as usize) % 24;
            let start_days: BTreeSet<usize> = ws.iter().map(|w| w.start_slot / 24 % 7).collect();
            let end_days: BTreeSet<usize> = ws
                .iter()
                .map(|w| (w.start_slot + w.hours as usize) % nslots / 24 % 7)
                .collect();
            let cron_days = |days: &BTreeSet<usize>| -> String {
                if weekly {
                    days.iter()
                        .map(|&d| cron_dow(d).to_string())
                        .collect::<Vec<_>>()
                        .join(",")
                } else {
                    "*".into()
                }
            };
            let on_calendar = |days: &BTreeSet<usize>, h: usize| -> String {
                let d = if weekly {
                    format!("{} ", systemd_days(days))
                } else {
                    String::new()
                };
                format!("OnCalendar={d}*-*-* {h:02}:00:00 {tz}")
            };
            let (start, end) = (format!("{h0:02}:00"), format!("{end_h:02}:00"));
            let day_shift = (h0 + len as usize) / 24;
            let label = if !weekly {
                format!("every day {start}–{end}")
            } else if day_shift >= 2 || len >= 24 {
                format!(
                    "{} {start}–{} {end}",
                    days_label(&start_days),
                    days_label(&end_days)
                )
            } else {
                format!("{} {start}–{end}", days_label(&start_days))
            };
            let first = ws.iter().map(|w| w.start_slot).min().unwrap_or(0);
            entries.push((
                first,
                ScheduleEntry {
                    tier: ti + 1,
                    days: if weekly {
                        start_days.iter().map(|&d| DAYS[d]).collect()
                    } else {
                        Vec::new()
                    },
                    end_days: if weekly {
                        end_days.iter().map(|&d| DAYS[d]).collect()
                    } else {
                        Vec::new()
                    },
                    label,
                    start,
                    end,
                    hours: len,
                    expected_free_gpus: ws.iter().map(|w| w.expected_free_gpus).min().unwrap_or(0),
                    above_baseline: ws.iter().map(|w| w.above_baseline).min().unwrap_or(0),
                    confidence: ws.iter().map(|w| w.confidence).fold(1.0, f64::min),
                    cron_start: format!("CRON_TZ={tz} 0 {h0} * * {}", cron_days(&start_days)),
                    cron_end: format!("CRON_TZ={tz} 0 {end_h} * * {}", cron_days(&end_days)),
                    systemd_start: on_calendar(&start_days, h0),
                    systemd_end: on_calendar(&end_days, end_h),
                },
            ));
        }
        entries.sort_by_key(|(first, _)| *first);
        out.extend(entries.into_iter().map(|(_, e)| e));
    }
    out
}

impl Detector for OffPeak {
    fn id(&self) -> &'static str {
        "offpeak_window"
    }

    fn title(&self) -> &'static str {
        "Off-peak training windows"
    }

    fn validate(&self, params: &Params) -> Result<(), AdvisorError> {
        let p = &params.offpeak;
        if !(0.0..=1.0).contains(&p.min_share) {
            return Err(AdvisorError::Param {
                name: "--offpeak.min-share",
                reason: format!("{} is not a share in 0–1", p.min_share),
            });
        }
        Ok(())
    }

    fn partial(&self, frames: &Frames, params: &Params) -> Result<Partial, AdvisorError> {
        Ok(Box::new(free_gpus_per_hour(frames, &params.offpeak)?))
    }

    fn finish(&self, parts: Vec<Partial>, params: &Params) -> Result<DetectorOutput, AdvisorError> {
        let p = &params.offpeak;
        // Partitions hold disjoint GPUs: free counts and GPU counts add up.
        let mut free = FreeGpus::default();
        for part in unbox::<FreeGpus>(self.id(), parts)? {
            free.merge(part);
        }
        let prof = profile(&free, params);
        let tz = params.tz.name();
        let entries = schedule(&prof, tz);
        let period = prof.period;
        let share = format!("{:.0}%", p.min_share * 100.0);
        let mut out = DetectorOutput::default();
        let periods = prof.slots.iter().map(|s| s.observations).max().unwrap_or(0);
        if periods < 2 {
            out.notes.push(format!(
                "only {periods} {period}(s) observed: the baseline and windows are a guess until more history exists"
            ));
        }
        if !prof.tiers_left_out.is_empty() {
            out.notes.push(format!(
                "{} more tier(s) of free capacity left out ({}): only the {MAX_TIERS} adding the most GPU-hours are reported",
                prof.tiers_left_out.len(),
                prof.tiers_left_out
                    .iter()
                    .map(|t| format!(
                        "≥ {} GPU(s) free, {} GPU-hour(s) per {period} above the baseline",
                        t.free_gpus, t.gpu_hours
                    ))
                    .collect::<Vec<_>>()
                    .join("; ")
            ));
        }
        let b = &prof.baseline;
        let all_the_time = if period == "week" {
            "all week"
        } else {
            "around the clock"
        };
        if b.gpus > 0 {
            out.findings.push(Finding {
                id: finding_id(self.id(), &["baseline"]),
                detector: self.id(),
                severity: Severity::Warning,
                entity: Entity {
                    kind: "fleet".into(),
                    ..Entity::default()
                },
                summary: format!(
                    "{} of {} GPU(s) free {all_the_time} in ≥ {share} of observed {period}s: {} — over-provisioned",
                    b.gpus,
                    prof.gpus_observed,
                    b.models_text()
                ),
                action: format!(
                    "release or repurpose them (return them to the pool, shrink the reservation, or give them to batch and training queues): they were free at every observed hour of the {period} ({tz})"
                ),
                evidence: json!({
                    "type": "baseline",
                    "period": period,
                    "tz": tz,
                    "gpus": b.gpus,
                    "gpus_observed": prof.gpus_observed,
                    "by_model": b.by_model,
                    "unattributed_gpus": b.unattributed(),
                    "min_share": p.min_share,
                    "gpu_hours_per_period": u64::from(b.gpus) * prof.nslots() as u64,
                }),
            });
        }
        for e in &entries {
            let key = if e.days.is_empty() {
                "every day".to_string()
            } else {
                e.days.join(",")
            };
            let above = if b.gpus > 0 {
                format!(
                    " ({} more than the {} free {all_the_time})",
                    e.above_baseline, b.gpus
                )
            } else {
                String::new()
            };
            out.findings.push(Finding {
                id: finding_id(self.id(), &[period, &key, &e.start, &e.hours.to_string()]),
                detector: self.id(),
                severity: Severity::Info,
                entity: Entity {
                    kind: "fleet".into(),
                    ..Entity::default()
                },
                summary: format!(
                    "{} {tz} ({} h): ≥ {} GPU(s) free{above} in {:.0}% of observed {period}s",
                    e.label,
                    e.hours,
                    e.expected_free_gpus,
                    e.confidence * 100.0,
                ),
                action: format!(
                    "schedule training or batch jobs to start at {} and stop by {} ({tz}); cron: {} (start), {} (stop); systemd timer: {} (start), {} (stop)",
                    e.start, e.end, e.cron_start, e.cron_end, e.systemd_start, e.systemd_end
                ),
                evidence: json!({
                    "type": "window",
                    "period": period,
                    "tz": tz,
                    "tier": e.tier,
                    "days": e.days,
                    "end_days": e.end_days,
                    "start": e.start,
                    "end": e.end,
                    "hours": e.hours,
                    "min_gpus": prof.k,
                    "expected_free_gpus": e.expected_free_gpus,
                    "baseline_gpus": b.gpus,
                    "above_baseline": e.above_baseline,
                    "confidence": super::r3(e.confidence),
                    "cron_start": e.cron_start,
                    "cron_end": e.cron_end,
                    "systemd_start": e.systemd_start,
                    "systemd_end": e.systemd_end,
                }),
            });
        }
        out.summary = format!(
            "{} of {} GPU(s) free {all_the_time} (baseline); {} window(s) in {} tier(s) of ≥ {} h with ≥ {} more GPU(s) free, in ≥ {share} of observed {period}s ({tz})",
            b.gpus,
            prof.gpus_observed,
            entries.len(),
            prof.tiers.len(),
            p.min_hours,
            prof.k,
        );
        out.data = json!({
            "period": period,
            "min_gpus": prof.k,
            "gpus_observed": prof.gpus_observed,
            "baseline": prof.baseline,
            "profile": prof.slots.iter().map(|s| json!({
                "slot": s.label, "observations": s.observations, "share": super::r3(s.share),
                "free_at_p": s.free_at_p, "free_median": s.free_median,
            })).collect::<Vec<_>>(),
            "windows": prof.windows,
            "tiers": prof.tiers,
        });
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use chrono_tz::Tz;

    /// 2026-11-02T00:00Z (a Monday) as an hour index.
    const MON: i64 = 1_793_577_600 / 3600;
    const H100: &str = "NVIDIA H100 80GB HBM3";
    const A100: &str = "NVIDIA A100-SXM4-80GB";

    fn params(k: u32) -> Params {
        Params {
            offpeak: OffpeakParams {
                min_gpus: MinGpus::Count(k),
                ..OffpeakParams::default()
            },
            ..Params::default()
        }
    }

    /// One model's free counts per UTC hour.
    fn one_model(m: BTreeMap<i64, u32>, gpus: usize) -> FreeGpus {
        FreeGpus {
            per_hour: m
                .into_iter()
                .map(|(h, f)| (h, BTreeMap::from([("gpu".to_string(), f)])))
                .collect(),
            gpus: BTreeMap::from([("gpu".to_string(), gpus)]),
        }
    }

    /// `hours` hours from Monday 00:00 local time in `tz`; `f(local slot of the week)` gives the
    /// free GPUs per model.
    fn local_hours(
        tz: Tz,
        hours: i64,
        gpus: &[(&str, usize)],
        f: impl Fn(usize) -> Vec<(&'static str, u32)>,
    ) -> FreeGpus {
        let start = tz
            .with_ymd_and_hms(2026, 11, 2, 0, 0, 0)
            .unwrap()
            .timestamp()
            / 3600;
        let mut out = FreeGpus {
            gpus: gpus.iter().map(|&(m, g)| (m.to_string(), g)).collect(),
            ..FreeGpus::default()
        };
        for h in start..start + hours {
            let local = DateTime::<Utc>::from_timestamp(h * 3600, 0)
                .unwrap()
                .with_timezone(&tz);
            let slot = local.weekday().num_days_from_monday() as usize * 24 + local.hour() as usize;
            out.per_hour.insert(
                h,
                f(slot)
                    .into_iter()
                    .filter(|&(_, n)| n > 0)
                    .map(|(m, n)| (m.to_string(), n))
                    .collect(),
            );
        }
        out
    }

    fn finish(free: FreeGpus, params: &Params) -> DetectorOutput {
        OffPeak.finish(vec![Box::new(free)], params).unwrap()
    }

    #[test]
    fn baseline_and_nights_and_weekend_tiers() {
        // 10 GPUs (6 H100, 4 A100) over 3 weeks in Berlin: one of each model is free all the
        // time; nights Mon–Thu 19:00–07:00 add 4 H100s (6 free); the weekend, Fri 19:00 –
        // Mon 07:00, adds 4 H100s and 2 A100s (8 free).
        let tz: Tz = "Europe/Berlin".parse().unwrap();
        let free = local_hours(tz, 21 * 24, &[(H100, 6), (A100, 4)], |s| {
            let (d, h) = (s / 24, s % 24);
            let weekend = (d == 4 && h >= 19) || d >= 5 || (d == 0 && h < 7);
            let night = ((0..=3).contains(&d) && h >= 19) || ((1..=4).contains(&d) && h < 7);
            if weekend {
                vec![(H100, 5), (A100, 3)]
            } else if night {
                vec![(H100, 5), (A100, 1)]
            } else {
                vec![(H100, 1), (A100, 1)]
            }
        });
        let mut params = params(2);
        params.tz = tz;
        let p = profile(&free, &params);
        assert_eq!(p.period, "week");
        assert_eq!(p.gpus_observed, 10);
        assert_eq!(p.baseline.gpus, 2);
        assert_eq!(
            p.baseline.by_model,
            vec![
                ModelGpus {
                    model: A100.into(),
                    gpus: 1,
                    gpus_observed: 4
                },
                ModelGpus {
                    model: H100.into(),
                    gpus: 1,
                    gpus_observed: 6
                },
            ]
        );
        let levels: Vec<(u32, u32)> = p
            .tiers
            .iter()
            .map(|t| (t.free_gpus, t.above_baseline))
            .collect();
        assert_eq!(levels, vec![(6, 4), (8, 6)]);
        // The nights alone at 6 (the weekend keeps its shape at 8, so it is reported there).
        let shape = |t: &Tier| -> Vec<(usize, u32)> {
            t.windows.iter().map(|w| (w.start_slot, w.hours)).collect()
        };
        assert_eq!(
            shape(&p.tiers[0]),
            vec![(19, 12), (43, 12), (67, 12), (91, 12)]
        );
        assert_eq!(shape(&p.tiers[1]), vec![(4 * 24 + 19, 60)]);
        assert_eq!(p.tiers[0].gpu_hours, 4 * 12 * 4);
        assert!(p.tiers_left_out.is_empty());
        // All off-peak time (≥ B + K free): the nights and the weekend.
        assert_eq!(p.windows.len(), 5);
        assert_eq!(p.windows[4].expected_free_gpus, 8);

        let s = schedule(&p, tz.name());
        assert_eq!(s.len(), 2);
        let (n, w) = (&s[0], &s[1]);
        assert_eq!((n.tier, n.expected_free_gpus, n.above_baseline), (1, 6, 4));
        assert_eq!(n.days, vec!["Mon", "Tue", "Wed", "Thu"]);
        assert_eq!(n.end_days, vec!["Tue", "Wed", "Thu", "Fri"]);
        assert_eq!(
            (n.start.as_str(), n.end.as_str(), n.hours),
            ("19:00", "07:00", 12)
        );
        assert_eq!(n.label, "Mon–Thu 19:00–07:00");
        assert_eq!(n.cron_start, "CRON_TZ=Europe/Berlin 0 19 * * 1,2,3,4");
        assert_eq!(n.cron_end, "CRON_TZ=Europe/Berlin 0 7 * * 2,3,4,5");
        assert_eq!(
            n.systemd_start,
            "OnCalendar=Mon..Thu *-*-* 19:00:00 Europe/Berlin"
        );
        assert_eq!(
            n.systemd_end,
            "OnCalendar=Tue..Fri *-*-* 07:00:00 Europe/Berlin"
        );
        assert_eq!((w.tier, w.expected_free_gpus, w.above_baseline), (2, 8, 6));
        assert_eq!(
            (w.days.clone(), w.end_days.clone()),
            (vec!["Fri"], vec!["Mon"])
        );
        assert_eq!(w.label, "Fri 19:00–Mon 07:00");
        assert_eq!(w.cron_start, "CRON_TZ=Europe/Berlin 0 19 * * 5");
        assert_eq!(w.cron_end, "CRON_TZ=Europe/Berlin 0 7 * * 1");
        assert_eq!(
            w.systemd_start,
            "OnCalendar=Fri *-*-* 19:00:00 Europe/Berlin"
        );
        assert_eq!(w.systemd_end, "OnCalendar=Mon *-*-* 07:00:00 Europe/Berlin");

        // The findings: the baseline (over-provisioning, with the models), then the tiers.
        let out = finish(free, &params);
        let types: Vec<&str> = out
            .findings
            .iter()
            .map(|f| f.evidence["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, ["baseline", "window", "window"]);
        let b = &out.findings[0];
        assert_eq!(b.id, finding_id("offpeak_window", &["baseline"]));
        assert_eq!(b.severity, Severity::Warning);
        assert_eq!(b.evidence["gpus"], 2);
        assert_eq!(b.evidence["by_model"][1]["model"], H100);
        assert!(
            b.summary.contains(&format!(
                "2 of 10 GPU(s) free all week in ≥ 90% of observed weeks: 1 × {A100}, 1 × {H100}"
            )),
            "{}",
            b.summary
        );
        assert!(b.action.starts_with("release or repurpose"), "{}", b.action);
        let night = &out.findings[1];
        assert_eq!(night.evidence["tier"], 1);
        assert_eq!(night.evidence["expected_free_gpus"], 6);
        assert_eq!(night.evidence["above_baseline"], 4);
        assert_eq!(night.evidence["baseline_gpus"], 2);
        assert_eq!(
            night.evidence["systemd_start"],
            "OnCalendar=Mon..Thu *-*-* 19:00:00 Europe/Berlin"
        );
        assert!(
            night
                .summary
                .starts_with("Mon–Thu 19:00–07:00 Europe/Berlin (12 h): ≥ 6 GPU(s) free (4 more than the 2 free all week)"),
            "{}",
            night.summary
        );
        let ids: BTreeSet<&str> = out.findings.iter().map(|f| f.id.as_str()).collect();
        assert_eq!(ids.len(), 3);
        let text = serde_json::to_string(&out).unwrap();
        assert!(
            !text.contains("@reboot") && !text.contains("always"),
            "{text}"
        );
        assert_eq!(out.data["baseline"]["gpus"], 2);
        assert_eq!(out.data["tiers"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn without_a_baseline_windows_cross_midnight() {
        // 10 days (a daily profile): 4 GPUs free 20:00–06:00, none by day.
        let m: BTreeMap<i64, u32> = (0..240)
            .map(|h| (MON + h, if (6..20).contains(&(h % 24)) { 0 } else { 4 }))
            .collect();
        let mut q = params(1);
        q.offpeak.min_gpus = MinGpus::Share(0.1);
        let p = profile(&one_model(m.clone(), 4), &q);
        assert_eq!((p.period, p.k, p.baseline.gpus), ("day", 1, 0));
        assert!(p.baseline.by_model.is_empty());
        assert_eq!(p.tiers.len(), 1);
        assert_eq!((p.tiers[0].free_gpus, p.tiers[0].above_baseline), (4, 4));
        let s = schedule(&p, "UTC");
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].label, "every day 20:00–06:00");
        assert!(s[0].days.is_empty());
        assert_eq!(s[0].hours, 10);
        assert_eq!(s[0].cron_start, "CRON_TZ=UTC 0 20 * * *");
        assert_eq!(s[0].cron_end, "CRON_TZ=UTC 0 6 * * *");
        assert_eq!(s[0].systemd_start, "OnCalendar=*-*-* 20:00:00 UTC");
        assert_eq!(s[0].systemd_end, "OnCalendar=*-*-* 06:00:00 UTC");
        let out = finish(one_model(m, 4), &q);
        assert_eq!(out.findings.len(), 1);
        assert_eq!(out.findings[0].evidence["type"], "window");
        assert!(
            out.findings[0]
                .summary
                .starts_with("every day 20:00–06:00 UTC (10 h): ≥ 4 GPU(s) free in 100%"),
            "{}",
            out.findings[0].summary
        );
    }

    #[test]
    fn capacity_free_all_the_time_is_the_baseline_not_a_window() {
        // 3 of 5 GPUs free at every hour of 3 weeks, the others never.
        let m: BTreeMap<i64, u32> = (0..21 * 24).map(|h| (MON + h, 3)).collect();
        let p = profile(&one_model(m.clone(), 5), &params(1));
        assert_eq!(p.baseline.gpus, 3);
        assert!(p.windows.is_empty() && p.tiers.is_empty());
        let out = finish(one_model(m, 5), &params(1));
        assert_eq!(out.findings.len(), 1, "{:?}", out.findings);
        assert_eq!(out.findings[0].evidence["type"], "baseline");
        assert_eq!(out.findings[0].evidence["by_model"][0]["gpus"], 3);
        assert!(
            out.findings[0]
                .summary
                .starts_with("3 of 5 GPU(s) free all week in ≥ 90% of observed weeks: 3 × gpu"),
            "{}",
            out.findings[0].summary
        );
        let text = serde_json::to_string(&out).unwrap();
        assert!(!text.contains("@reboot"), "{text}");
        // Every GPU free all the time: the same. No data: nothing.
        let m: BTreeMap<i64, u32> = (0..48).map(|h| (MON + h, 5)).collect();
        let p = profile(&one_model(m, 5), &params(1));
        assert_eq!((p.baseline.gpus, p.windows.len()), (5, 0));
        let p = profile(&FreeGpus::default(), &params(1));
        assert_eq!((p.baseline.gpus, p.windows.len()), (0, 0));
        assert!(finish(FreeGpus::default(), &params(1)).findings.is_empty());
    }

    #[test]
    fn window_wraps_sunday_to_monday() {
        // 3 weeks, 2 GPUs free Sun 22:00 – Mon 04:00, none otherwise.
        let m: BTreeMap<i64, u32> = (0..21 * 24)
            .map(|h| {
                let slot = (h % 168) as usize;
                (MON + h, if !(4..166).contains(&slot) { 2 } else { 0 })
            })
            .collect();
        let p = profile(&one_model(m, 2), &params(1));
        assert_eq!(p.period, "week");
        assert_eq!(
            p.windows,
            vec![Window {
                start_slot: 166,
                hours: 6,
                expected_free_gpus: 2,
                above_baseline: 2,
                confidence: 1.0
            }]
        );
        let s = schedule(&p, "UTC");
        assert_eq!(s.len(), 1);
        assert_eq!(
            (s[0].days.clone(), s[0].end_days.clone()),
            (vec!["Sun"], vec!["Mon"])
        );
        assert_eq!(s[0].label, "Sun 22:00–04:00");
        assert_eq!(s[0].cron_start, "CRON_TZ=UTC 0 22 * * 0");
        assert_eq!(s[0].cron_end, "CRON_TZ=UTC 0 4 * * 1");
        assert_eq!(s[0].systemd_start, "OnCalendar=Sun *-*-* 22:00:00 UTC");
        assert_eq!(s[0].systemd_end, "OnCalendar=Mon *-*-* 04:00:00 UTC");
    }

    #[test]
    fn weekend_window_wraps_around_the_week() {
        // 3 weeks: free 8 GPUs from Fri 20:00 to Mon 06:00, 0 otherwise.
        let mut m = BTreeMap::new();
        for h in 0..21 * 24 {
            let slot = (h % 168) as usize;
            let free = !(6..4 * 24 + 20).contains(&slot);
            m.insert(MON + h, if free { 8 } else { 0 });
        }
        let p = profile(&one_model(m, 8), &params(4));
        assert_eq!(p.period, "week");
        assert_eq!(
            p.windows,
            vec![Window {
                start_slot: 4 * 24 + 20,
                hours: 58,
                expected_free_gpus: 8,
                above_baseline: 8,
                confidence: 1.0
            }]
        );
        let s = schedule(&p, "UTC");
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].label, "Fri 20:00–Mon 06:00");
        assert_eq!(s[0].cron_start, "CRON_TZ=UTC 0 20 * * 5");
        assert_eq!(s[0].cron_end, "CRON_TZ=UTC 0 6 * * 1");
    }

    #[test]
    fn short_runs_and_unreliable_hours_are_not_windows() {
        // 10 days, hour-of-day mode, 1 GPU always free: 02:00–05:00 5 free (3 h, too short);
        // 12:00–18:00 5 free on only 8 of 10 days (< 90%).
        let mut m = BTreeMap::new();
        for d in 0..10 {
            for h in 0..24 {
                let free = (2..5).contains(&h) || ((12..18).contains(&h) && d < 8);
                m.insert(MON + d * 24 + h, if free { 5 } else { 1 });
            }
        }
        let p = profile(&one_model(m.clone(), 8), &params(4));
        assert_eq!((p.period, p.baseline.gpus), ("day", 1));
        assert!(p.windows.is_empty(), "{:?}", p.windows);
        // At P = 0.8 the afternoon qualifies.
        let mut q = params(4);
        q.offpeak.min_share = 0.8;
        let p = profile(&one_model(m, 8), &q);
        assert_eq!(p.windows.len(), 1);
        assert_eq!((p.windows[0].start_slot, p.windows[0].hours), (12, 6));
        assert_eq!(p.windows[0].confidence, 0.8);
        assert_eq!(p.windows[0].above_baseline, 4);
    }

    #[test]
    fn a_window_barely_longer_than_a_higher_tier_is_left_out() {
        // 10 days: 4 GPUs free 17:00–07:00, 3 until 08:00, none by day. The 3-GPU window adds
        // one hour (< 4) to the 4-GPU one: one tier. 5 free 20:00–02:00 adds a tier inside it
        // (6 h), and the 4-GPU window around it still adds 8 h of its own.
        let free = |h: i64| match h % 24 {
            20..=23 | 0..=1 => 5,
            17..=19 | 2..=6 => 4,
            7 => 3,
            _ => 0,
        };
        let m: BTreeMap<i64, u32> = (0..240).map(|h| (MON + h, free(h))).collect();
        let p = profile(&one_model(m, 6), &params(1));
        let tiers: Vec<(u32, Vec<(usize, u32)>)> = p
            .tiers
            .iter()
            .map(|t| {
                (
                    t.free_gpus,
                    t.windows.iter().map(|w| (w.start_slot, w.hours)).collect(),
                )
            })
            .collect();
        assert_eq!(tiers, vec![(4, vec![(17, 14)]), (5, vec![(20, 6)])]);
        // The off-peak time as a whole is still 17:00–08:00.
        assert_eq!(
            p.windows
                .iter()
                .map(|w| (w.start_slot, w.hours, w.expected_free_gpus))
                .collect::<Vec<_>>(),
            vec![(17, 15, 3)]
        );
    }

    #[test]
    fn at_most_three_tiers_the_rest_in_a_note() {
        // 10 days, free GPUs rising by hour: 0 (00–04), 1 (04–08), 2, 3, 4, 5 (20–24). Nested
        // windows at five levels; GPU-hours added: 20, 32, 36, 32, 20.
        let m: BTreeMap<i64, u32> = (0..240).map(|h| (MON + h, (h % 24 / 4) as u32)).collect();
        let p = profile(&one_model(m.clone(), 5), &params(1));
        let kept: Vec<(u32, u64)> = p.tiers.iter().map(|t| (t.free_gpus, t.gpu_hours)).collect();
        assert_eq!(kept, vec![(2, 32), (3, 36), (4, 32)]);
        let out: Vec<(u32, u64)> = p
            .tiers_left_out
            .iter()
            .map(|t| (t.free_gpus, t.gpu_hours))
            .collect();
        assert_eq!(out, vec![(1, 20), (5, 20)]);
        assert_eq!(
            (
                p.windows[0].start_slot,
                p.windows[0].hours,
                p.windows[0].expected_free_gpus
            ),
            (4, 20, 1)
        );
        let d = finish(one_model(m, 5), &params(1));
        assert_eq!(d.findings.len(), 3);
        assert!(
            d.notes.iter().any(|n| n.starts_with("2 more tier(s)")),
            "{:?}",
            d.notes
        );
    }

    #[test]
    fn baseline_models_that_take_turns() {
        // 10 days, one GPU of each of two models: A free 00–12, B free 12–24. One GPU is free
        // around the clock, but neither model on its own.
        let turns = |free_a: &dyn Fn(i64) -> bool, free_b: &dyn Fn(i64) -> bool| FreeGpus {
            per_hour: (0..240)
                .map(|h| {
                    let mut m = BTreeMap::new();
                    if free_a(h) {
                        m.insert("A".to_string(), 1);
                    }
                    if free_b(h) {
                        m.insert("B".to_string(), 1);
                    }
                    (MON + h, m)
                })
                .collect(),
            gpus: BTreeMap::from([("A".to_string(), 1), ("B".to_string(), 1)]),
        };
        let f = turns(&|h| h % 24 < 12, &|h| h % 24 >= 12);
        let p = profile(&f, &params(1));
        assert_eq!(p.baseline.gpus, 1);
        assert!(p.baseline.by_model.is_empty());
        assert_eq!(p.baseline.unattributed(), 1);
        assert_eq!(p.baseline.models_text(), "1 whose model varies by hour");
        // Both free except A on day 0 and B on day 1: each model on its own is free in 9 of 10
        // days (≥ 90%), both at once only in 8: B = 1, the models' own baselines add up to 2.
        let f = turns(&|h| h / 24 != 0, &|h| h / 24 != 1);
        let p = profile(&f, &params(1));
        assert_eq!(p.baseline.gpus, 1);
        assert_eq!(p.baseline.unattributed(), 0);
        assert_eq!(
            p.baseline.models_text(),
            "each model on its own: 1 × A, 1 × B, not all at once"
        );
        assert!(p.windows.is_empty());
    }

    #[test]
    fn free_gpus_are_counted_per_model() {
        let gib = (1u64 << 30) as f64;
        let end = |h: i64| (MON + h + 1) * HOUR_MS;
        // u1 (H100): free, then busy. u2 (no model): free, free, then 10 minutes only.
        // u3: model unknown in its first row, H100 later: free twice.
        let gpu = df!(
            "node" => ["n1", "n1", "n1", "n1", "n1", "n2", "n2"],
            "uuid" => ["u1", "u1", "u2", "u2", "u2", "u3", "u3"],
            "model" => [Some("H100"), Some("H100"), None, None, None, None, Some("H100")],
            "ts" => [end(0), end(1), end(0), end(1), end(2), end(0), end(1)],
            "interval_ms" => [HOUR_MS, HOUR_MS, HOUR_MS, HOUR_MS, 600_000, HOUR_MS, HOUR_MS],
            "sm_active_max" => [Some(0.0), Some(0.9), None, None, None, Some(0.01), Some(0.0)],
            "busy_max" => [Some(0.0), Some(0.9), Some(0.0), Some(0.02), Some(0.0), None, None],
            "memory_used_max_bytes" => [0.0, 10.0 * gib, 0.1 * gib, 0.0, 0.0, 0.0, 0.0],
        )
        .unwrap();
        let frames = Frames {
            gpu: gpu.lazy(),
            mig: DataFrame::empty().lazy(),
            process: DataFrame::empty().lazy(),
        };
        let f = free_gpus_per_hour(&frames, &OffpeakParams::default()).unwrap();
        let m = |v: &[(&str, u32)]| -> BTreeMap<String, u32> {
            v.iter().map(|&(k, n)| (k.to_string(), n)).collect()
        };
        assert_eq!(
            f.gpus,
            BTreeMap::from([("H100".to_string(), 2), (UNKNOWN_MODEL.to_string(), 1)])
        );
        assert_eq!(
            f.per_hour,
            BTreeMap::from([
                (MON, m(&[("H100", 2), (UNKNOWN_MODEL, 1)])),
                (MON + 1, m(&[("H100", 1), (UNKNOWN_MODEL, 1)])),
                (MON + 2, m(&[])),
            ])
        );
        // Partitions merge by adding.
        let mut g = f.clone();
        g.merge(f);
        assert_eq!(g.gpus_observed(), 6);
        assert_eq!(g.totals()[&MON], 6);
    }

    #[test]
    fn min_gpus_parses_counts_and_shares() {
        assert_eq!("4".parse::<MinGpus>(), Ok(MinGpus::Count(4)));
        assert_eq!("25%".parse::<MinGpus>(), Ok(MinGpus::Share(0.25)));
        for bad in ["0", "0%", "101%", "x", "-1", ""] {
            assert!(bad.parse::<MinGpus>().is_err(), "{bad}");
        }
        // A share rounds up and is at least one GPU.
        let mut p = params(1);
        p.offpeak.min_gpus = MinGpus::Share(0.1);
        let m: BTreeMap<i64, u32> = (0..24).map(|h| (MON + h, 2)).collect();
        assert_eq!(profile(&one_model(m.clone(), 11), &p).k, 2);
        assert_eq!(profile(&one_model(m, 3), &p).k, 1);
    }
}
