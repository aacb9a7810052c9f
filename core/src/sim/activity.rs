//! Workload activity models: what one simulated workload does at one instant.
//!
//! Every function here is a pure function of (seed, workload, time): noise comes from hashing
//! those three, not from a sequential generator, so any instant can be computed directly (the fake
//! NVML library and `tessera simulate` jump around in time) and the same seed always gives the
//! same values.
//!
//! This module knows nothing about GPUs or NVML; [`super::node`] turns activities into readings.

use chrono::{Datelike, Timelike};

use super::scenario::{Pipes, Scenario, WorkloadKind, WorkloadSpec, weekday_index};

/// What each profiling pipe does per unit of a workload's SM activity (GPM's view): any tensor
/// pipe, DFMA/HMMA/IMMA tensor, DRAM bandwidth, FP64/FP32/FP16/integer, and NVLink bytes per second
/// per unit of activity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PipeMix {
    pub tensor: f64,
    pub dfma: f64,
    pub hmma: f64,
    pub imma: f64,
    pub dram: f64,
    pub fp64: f64,
    pub fp32: f64,
    pub fp16: f64,
    pub integer: f64,
    pub nvlink_bytes_per_second: f64,
}

/// The mix of a workload: training runs half-precision tensor work with heavy DRAM traffic and
/// NVLink all-reduce; inference lighter DRAM and no NVLink; INT8 inference on the IMMA pipe;
/// FP64 HPC on the double-precision pipes and DFMA; data loading keeps kernels running with the
/// tensor pipes and DRAM nearly idle. Idle workloads have no activity to scale.
pub fn pipe_mix(w: &WorkloadSpec) -> PipeMix {
    let training = w.kind == WorkloadKind::Training;
    let none = PipeMix {
        tensor: 0.0,
        dfma: 0.0,
        hmma: 0.0,
        imma: 0.0,
        dram: 0.0,
        fp64: 0.0,
        fp32: 0.0,
        fp16: 0.0,
        integer: 0.0,
        nvlink_bytes_per_second: 0.0,
    };
    match w.pipes {
        Pipes::Tensor => PipeMix {
            tensor: 0.9,
            hmma: 0.9,
            dram: if training { 0.7 } else { 0.45 },
            fp32: 0.12,
            fp16: 0.04,
            integer: 0.03,
            nvlink_bytes_per_second: if training { 40e9 } else { 0.0 },
            ..none
        },
        Pipes::Int8 => PipeMix {
            tensor: 0.85,
            imma: 0.85,
            dram: 0.4,
            fp32: 0.05,
            integer: 0.1,
            ..none
        },
        Pipes::Fp64 => PipeMix {
            tensor: 0.5,
            dfma: 0.5,
            dram: 0.55,
            fp64: 0.6,
            fp32: 0.1,
            integer: 0.05,
            nvlink_bytes_per_second: if training { 20e9 } else { 0.0 },
            ..none
        },
        Pipes::DataLoading => PipeMix {
            tensor: 0.02,
            hmma: 0.02,
            dram: 0.05,
            fp32: 0.08,
            integer: 0.15,
            ..none
        },
    }
}

/// What one workload does at one second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Activity {
    /// SM activity of its GPU or MIG instance, 0–1.
    pub sm: f64,
    /// Share of time a kernel of it ran, 0–1 (≥ `sm`).
    pub busy: f64,
    pub memory_bytes: u64,
}

/// SplitMix64 finaliser: a well-mixed 64-bit hash.
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A uniform value in [0, 1) determined by the three keys.
pub fn unit(seed: u64, a: u64, b: u64) -> f64 {
    let h = mix(seed ^ mix(a.wrapping_mul(0x100_0000_01B3) ^ mix(b)));
    (h >> 11) as f64 / (1u64 << 53) as f64
}

/// Local calendar facts of an instant.
struct Local {
    /// Hour of day, fractional.
    hour: f64,
    /// Monday = 0.
    weekday: u32,
    /// Seconds since the local midnight.
    secs_of_day: i64,
}

fn local(scenario: &Scenario, t: i64) -> Local {
    let lt = chrono::DateTime::from_timestamp(t + scenario.utc_offset_hours as i64 * 3600, 0)
        .unwrap_or_default()
        .naive_utc();
    let secs_of_day = lt.num_seconds_from_midnight() as i64;
    Local {
        hour: secs_of_day as f64 / 3600.0,
        weekday: lt.weekday().num_days_from_monday(),
        secs_of_day,
    }
}

/// Whether a training run scheduled daily at `start_hour` for `duration_hours` covers `t`.
fn in_daily_run(
    scenario: &Scenario,
    w: &WorkloadSpec,
    t: i64,
    start_hour: f64,
    hours: f64,
) -> bool {
    let l = local(scenario, t);
    let start = (start_hour * 3600.0) as i64;
    let len = (hours * 3600.0) as i64;
    // The run that began today, or one that began on an earlier day and is still going.
    (0..=(len / 86_400) + 1).any(|days_back| {
        let since = l.secs_of_day - start + days_back * 86_400;
        if since < 0 || since >= len {
            return false;
        }
        let weekday = (l.weekday as i64 - days_back).rem_euclid(7) as u32;
        match &w.days {
            None => true,
            Some(days) => days.iter().any(|d| weekday_index(d) == Some(weekday)),
        }
    })
}

/// Whether the workload holds its memory at `t`, and its activity level (before efficiency).
fn level(scenario: &Scenario, index: usize, w: &WorkloadSpec, t: i64) -> Option<f64> {
    if w.from.is_some_and(|f| t < f.timestamp()) || w.until.is_some_and(|u| t >= u.timestamp()) {
        return None;
    }
    let seed = scenario.seed;
    let noise = |salt: u64| (unit(seed, index as u64 * 31 + salt, t as u64) * 2.0 - 1.0) * w.noise;
    match w.kind {
        WorkloadKind::Idle => Some(0.0),
        WorkloadKind::Inference => {
            let l = local(scenario, t);
            let daily = 0.5 - 0.5 * (2.0 * std::f64::consts::PI * (l.hour - 2.0) / 24.0).cos();
            let week = if l.weekday >= 5 { 0.5 } else { 1.0 };
            Some((w.base + (w.peak - w.base) * daily * week + noise(1)).clamp(0.005, 1.0))
        }
        WorkloadKind::Training => {
            let running = match (w.start_hour, w.duration_hours) {
                (Some(h), Some(d)) => in_daily_run(scenario, w, t, h, d),
                _ => true,
            };
            running.then(|| (w.peak + noise(2)).clamp(0.01, 1.0))
        }
        WorkloadKind::Notebook => {
            let l = local(scenario, t);
            let working = l.weekday < 5 && (9.0..18.0).contains(&l.hour);
            working.then(|| {
                let bucket = t.div_euclid(300) as u64;
                let p = w.burst_probability.unwrap_or(0.15);
                if unit(seed, index as u64 * 31 + 3, bucket) < p {
                    (w.peak + noise(4)).clamp(0.01, 1.0)
                } else {
                    0.0
                }
            })
        }
        WorkloadKind::Batch => {
            let every = (w.every_hours.unwrap_or(24.0) * 3600.0) as i64;
            let len = (w.duration_minutes.unwrap_or(60.0) * 60.0) as i64;
            let offset = (w.start_hour.unwrap_or(0.0) * 3600.0) as i64
                - scenario.utc_offset_hours as i64 * 3600;
            ((t - offset).rem_euclid(every.max(1)) < len)
                .then(|| (w.peak + noise(5)).clamp(0.01, 1.0))
        }
    }
}

/// The activity of workload `index` at unix second `t`, or `None` when it is not loaded.
pub fn activity(scenario: &Scenario, index: usize, t: i64) -> Option<Activity> {
    let w = &scenario.workloads[index];
    level(scenario, index, w, t).map(|sm| Activity {
        sm,
        busy: if sm <= 0.0 {
            0.0
        } else {
            (sm / w.efficiency).min(1.0)
        },
        memory_bytes: (w.memory_gib * (1u64 << 30) as f64) as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario(workload: &str) -> Scenario {
        let text = format!(
            r#"
name = "t"
seed = 3
start = "2026-11-02T00:00:00Z"
[[nodes]]
name = "n"
gpus = [{{ model = "H100-80GB", count = 1 }}]
[[workloads]]
node = "n"
gpu = 0
{workload}
"#
        );
        Scenario::from_toml(&text, "test").unwrap()
    }

    fn at(s: &str) -> i64 {
        chrono::DateTime::parse_from_rfc3339(s).unwrap().timestamp()
    }

    #[test]
    fn idle_holds_memory_with_zero_activity() {
        let s = scenario(
            r#"name = "m"
kind = "idle"
memory_gib = 12.0"#,
        );
        let a = activity(&s, 0, at("2026-11-02T10:00:00Z")).unwrap();
        assert_eq!((a.sm, a.busy), (0.0, 0.0));
        assert_eq!(a.memory_bytes, 12 << 30);
    }

    #[test]
    fn training_runs_only_in_its_window_and_crosses_midnight() {
        let s = scenario(
            r#"name = "train"
kind = "training"
memory_gib = 60.0
start_hour = 22.0
duration_hours = 6.0
days = ["mon"]"#,
        );
        // 2026-11-02 is a Monday.
        assert!(activity(&s, 0, at("2026-11-02T21:59:59Z")).is_none());
        assert!(activity(&s, 0, at("2026-11-02T22:00:00Z")).is_some());
        assert!(activity(&s, 0, at("2026-11-03T03:59:59Z")).is_some());
        assert!(activity(&s, 0, at("2026-11-03T04:00:00Z")).is_none());
        assert!(
            activity(&s, 0, at("2026-11-03T22:30:00Z")).is_none(),
            "not on tuesday"
        );
    }

    #[test]
    fn inference_peaks_in_the_afternoon_and_is_deterministic() {
        let s = scenario(
            r#"name = "api"
kind = "inference"
memory_gib = 20.0
peak = 0.7"#,
        );
        let night = activity(&s, 0, at("2026-11-03T02:00:00Z")).unwrap().sm;
        let day = activity(&s, 0, at("2026-11-03T14:00:00Z")).unwrap().sm;
        assert!(night < 0.12 && day > 0.6, "night {night} day {day}");
        assert_eq!(
            activity(&s, 0, 1_800_000_000),
            activity(&s, 0, 1_800_000_000)
        );
        let busy = activity(&s, 0, at("2026-11-03T14:00:00Z")).unwrap().busy;
        assert!(busy >= day);
    }

    #[test]
    fn batch_runs_periodically() {
        let s = scenario(
            r#"name = "b"
kind = "batch"
memory_gib = 8.0
every_hours = 6.0
duration_minutes = 30.0
start_hour = 1.0"#,
        );
        assert!(activity(&s, 0, at("2026-11-02T01:10:00Z")).is_some());
        assert!(activity(&s, 0, at("2026-11-02T01:40:00Z")).is_none());
        assert!(activity(&s, 0, at("2026-11-02T07:29:00Z")).is_some());
    }
}
