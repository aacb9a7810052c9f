//! Per GPU: activity quantiles, the free-GPU timeline of the charts, and the data-quality notes
//! (gaps, silent GPUs). Pure over one partition's rows.

use super::rows::{Gpu, Row};
use super::{FREE_ACTIVITY, FREE_MEMORY, GpuActivity, HOUR_MS, QualityNote, fmt_ms, r3};
use crate::stats::quantile;

/// Per-GPU activity distributions of one partition's GPUs (those with rows).
pub(super) fn gpu_activity(gpus: &[Gpu], per: &[&[&Row]]) -> Vec<GpuActivity> {
    gpus.iter()
        .zip(per)
        .filter(|(_, rs)| !rs.is_empty())
        .map(|(g, rs)| {
            let mut acts: Vec<f64> = rs.iter().filter_map(|r| r.activity()).collect();
            let mut hist = [0.0; 10];
            let mut t = 0.0;
            for r in rs.iter() {
                if let Some(a) = r.activity() {
                    hist[((a * 10.0) as usize).min(9)] += r.interval as f64;
                    t += r.interval as f64;
                }
            }
            let mean = (!acts.is_empty()).then(|| r3(acts.iter().sum::<f64>() / acts.len() as f64));
            GpuActivity {
                gpu: g.label(),
                model: g.model.clone(),
                mean,
                p50: quantile(&mut acts, 0.5).map(r3),
                p95: quantile(&mut acts, 0.95).map(r3),
                histogram: hist
                    .iter()
                    .map(|h| if t > 0.0 { r3(h / t) } else { 0.0 })
                    .collect(),
            }
        })
        .collect()
}

/// Free-capacity timeline counts of one partition: per UTC hour of the range, (GPUs with rows,
/// GPUs whose rows all held < 1 GiB and showed ≤ 5% activity, covering at least half the hour).
/// A GPU held by a pod or job is never free; one known to be held by nobody, with no memory
/// value (occupancy data), is.
pub(super) fn free_counts(rows: &[&Row], range: (i64, i64), timeline: &mut [(u32, u32)]) {
    let first_hour = range.0.div_euclid(3_600_000);
    let nh = timeline.len();
    // Per hour of the current GPU (rows come GPU by GPU): (covered ms, all free, seen).
    let mut cells: Vec<(i64, bool, bool)> = vec![(0, true, false); nh];
    let flush = |cells: &mut Vec<(i64, bool, bool)>, timeline: &mut [(u32, u32)]| {
        for (h, c) in cells.iter_mut().enumerate() {
            if c.2 {
                timeline[h].0 += 1;
                if c.1 && c.0 >= 1_800_000 {
                    timeline[h].1 += 1;
                }
            }
            *c = (0, true, false);
        }
    };
    let mut gpu = None;
    for r in rows {
        if gpu != Some(r.gpu) {
            if gpu.is_some() {
                flush(&mut cells, timeline);
            }
            gpu = Some(r.gpu);
        }
        let h = (r.ts - 1).div_euclid(3_600_000) - first_hour;
        if h < 0 || h as usize >= nh {
            continue;
        }
        let quiet = r.activity().is_none_or(|a| a <= FREE_ACTIVITY);
        let free = match r.held {
            Some(true) => false,
            Some(false) => r.mem().is_none_or(|m| m < FREE_MEMORY) && quiet,
            None => r.mem().is_some_and(|m| m < FREE_MEMORY) && quiet,
        };
        let c = &mut cells[h as usize];
        c.0 += r.interval;
        c.1 &= free;
        c.2 = true;
    }
    flush(&mut cells, timeline);
}

/// Per-GPU data-quality notes of one partition (`status`, `stopped`, in GPU order) and its
/// gaps (label, count, hours missing), sorted with every partition's at the end.
pub(super) fn gpu_notes(
    gpus: &[Gpu],
    per: &[&[&Row]],
    range: (i64, i64),
    notes: &mut Vec<QualityNote>,
    gaps: &mut Vec<(String, usize, f64)>,
) {
    let mut note = |kind: &str, message: String| {
        notes.push(QualityNote {
            kind: kind.into(),
            message,
        })
    };
    let max_gap = crate::advisor::idle::IdleParams::default().max_gap_intervals;
    for (g, rs) in gpus.iter().zip(per) {
        let Some(last) = rs.last() else { continue };
        let (mut n, mut missing) = (0usize, 0i64);
        for w in rs.windows(2) {
            let step = w[1].interval.max(1);
            let d = w[1].ts - w[0].ts;
            // What breaks a detector's span is a gap here too (advisor::breaks_span).
            if crate::advisor::breaks_span(d, step, max_gap) {
                n += 1;
                missing += d - step;
            }
        }
        if n > 0 {
            gaps.push((g.label(), n, missing as f64 / HOUR_MS));
        }
        let lost: i64 = rs.iter().filter(|r| r.lost).map(|r| r.interval).sum();
        if lost > 0 {
            note(
                "status",
                format!(
                    "{} ({}) was lost or in error for {:.1} h (rows without values)",
                    g.label(),
                    g.model,
                    lost as f64 / HOUR_MS
                ),
            );
        }
        if range.1 - last.ts > 2 * last.interval.max(60_000) {
            note(
                "stopped",
                format!(
                    "{} ({}) stopped reporting at {} ({:.1} h before the end)",
                    g.label(),
                    g.model,
                    fmt_ms(last.ts),
                    (range.1 - last.ts) as f64 / HOUR_MS
                ),
            );
        }
    }
}

// ---- the fold -------------------------------------------------------------------------------
