//! Sampling periods: how often an entity's data was actually sampled, found from its own
//! timestamps, and the rows (bucket end and length) its samples go into.
//!
//! Every source that is not already aggregated into rows (CSV; Prometheus, whose points come on
//! its query grid) gives each entity's samples to [`segments`] and [`assign`], which
//! - splits the entity's series into segments of one sampling period (a series may change
//!   period: a scrape interval changed, logs at 5 s followed by exports at 1 min), from a rolling
//!   estimate over [`WINDOW`] neighbouring samples that ignores gaps (a missed scrape still
//!   counts, an outage does not) and aliasing (15 s samples seen on a 10 s grid);
//! - picks each segment's row length with [`bucket_for`]: the smallest standard step (1 s, 2 s,
//!   5 s, 10 s, 15 s, 20 s, 30 s, 1 min, 2 min, 5 min, …) that is at least 90% of the period
//!   (jitter and rounding in the estimate), a multiple of the source's grid, and not finer than
//!   an explicit `--interval`. Never finer than the data: a 57 s series gets 60 s rows;
//! - assigns every sample to the row `(end − length, end]` with `end` a multiple of the length
//!   (the interval convention of every source, docs/frames.md). Where a series changes period,
//!   the first row after the change is shortened so that rows never overlap.
//!
//! Pure functions over sorted timestamps; this module reads nothing and aggregates nothing (the
//! resampler does).

/// Standard row lengths, ms. Beyond the last one, whole days.
pub const STANDARD_STEPS_MS: &[i64] = &[
    100, 200, 500, 1_000, 2_000, 5_000, 10_000, 15_000, 20_000, 30_000, 60_000, 120_000, 300_000,
    600_000, 900_000, 1_200_000, 1_800_000, 3_600_000, 7_200_000, 10_800_000, 21_600_000,
    43_200_000, 86_400_000,
];

/// A period estimate may be this much below the row length chosen for it (jitter, rounding).
pub const TOLERANCE: f64 = 0.9;

/// Neighbouring samples on each side in the rolling period estimate.
pub const WINDOW: usize = 8;

/// A run of samples with one sampling period.
#[derive(Debug, Clone, PartialEq)]
pub struct Segment {
    /// First sample (index into the entity's timestamps) and one past the last.
    pub start: usize,
    pub end: usize,
    /// Estimated sampling period, ms (`None`: a single sample, nothing to measure).
    pub period_ms: Option<f64>,
    /// Row length chosen for it, ms.
    pub bucket_ms: i64,
}

/// The row length for data sampled every `period_ms`, on a source grid of `grid_ms` (1 for raw
/// timestamps, the query step for Prometheus points), at least `min_ms` (an explicit
/// `--interval`, else 0).
pub fn bucket_for(period_ms: f64, grid_ms: i64, min_ms: i64) -> i64 {
    let grid = grid_ms.max(1);
    let need = (period_ms * TOLERANCE).max(min_ms as f64).max(grid as f64);
    let ok = |c: i64| c as f64 >= need && c % grid == 0;
    if min_ms > 0 && ok(min_ms) && (min_ms as f64) >= period_ms * TOLERANCE {
        return min_ms;
    }
    if let Some(&s) = STANDARD_STEPS_MS.iter().find(|&&s| ok(s)) {
        return s;
    }
    // Whole days (a multiple of the grid), or the grid's smallest multiple above `need`.
    let day = 86_400_000i64;
    let mut d = ((need / day as f64).ceil() as i64).max(1) * day;
    if d % grid != 0 {
        d = ((need / grid as f64).ceil() as i64).max(1) * grid;
    }
    d
}

/// The end of the row of length `bucket_ms` holding a sample at `ts`: rows are `(end − bucket,
/// end]`, ends multiples of the length.
pub fn row_end(ts: i64, bucket_ms: i64) -> i64 {
    let b = bucket_ms.max(1);
    ts.div_euclid(b) * b + if ts.rem_euclid(b) == 0 { 0 } else { b }
}

/// Sampling period of a run of samples: the time between them divided by the samples they
/// hold, leaving out steps longer than 3× the run's median (outages; a missed scrape, twice the
/// period, still counts). `ts` sorted and distinct, `counts[i]` the raw samples point `i` holds
/// (1 for a raw sample). `None` for fewer than two samples.
pub fn period_of(ts: &[i64], counts: &[u32]) -> Option<f64> {
    if ts.len() < 2 {
        return None;
    }
    let per: Vec<f64> = (1..ts.len())
        .map(|i| (ts[i] - ts[i - 1]) as f64 / f64::from(counts[i].max(1)))
        .collect();
    let m = median(&per);
    let (mut dt, mut n) = (0.0, 0.0);
    for i in 1..ts.len() {
        if per[i - 1] <= 3.0 * m {
            dt += (ts[i] - ts[i - 1]) as f64;
            n += f64::from(counts[i].max(1));
        }
    }
    (n > 0.0).then(|| dt / n)
}

fn median(v: &[f64]) -> f64 {
    let mut c = v.to_vec();
    c.sort_by(|a, b| a.total_cmp(b));
    let n = c.len();
    if n == 0 {
        0.0
    } else if n % 2 == 1 {
        c[n / 2]
    } else {
        (c[n / 2 - 1] + c[n / 2]) / 2.0
    }
}

/// The rolling period estimate at each step (`per`: each step's length over its sample count):
/// within a window either side, the steps up to 3× the window's median, their time over their
/// samples; `fallback_ms` where none is left.
fn rolling_periods(ts: &[i64], counts: &[u32], per: &[f64], fallback_ms: f64) -> Vec<f64> {
    let steps = per.len();
    let mut buf: Vec<f64> = Vec::with_capacity(2 * WINDOW + 1);
    let mut local: Vec<f64> = Vec::with_capacity(steps);
    for k in 0..steps {
        let lo = k.saturating_sub(WINDOW);
        let hi = (k + WINDOW + 1).min(steps);
        buf.clear();
        buf.extend_from_slice(&per[lo..hi]);
        let med = median(&buf);
        let (mut dt, mut c) = (0.0, 0.0);
        for j in lo..hi {
            if per[j] <= 3.0 * med {
                dt += (ts[j + 1] - ts[j]) as f64;
                c += f64::from(counts[j + 1].max(1));
            }
        }
        local.push(if c > 0.0 { dt / c } else { fallback_ms });
    }
    local
}

/// Merges each run shorter than two windows and a step into its longer neighbour (the left one
/// on a tie), shortest first, until every run is long enough or one is left.
fn merge_short_runs(runs: &mut Vec<(usize, usize, i64)>) {
    let min_run = 2 * WINDOW + 1;
    while runs.len() > 1 {
        let Some((i, _)) = runs
            .iter()
            .enumerate()
            .filter(|(_, r)| r.1 - r.0 < min_run)
            .min_by_key(|(_, r)| r.1 - r.0)
        else {
            break;
        };
        let left = i.checked_sub(1).map(|j| runs[j].1 - runs[j].0);
        let right = runs.get(i + 1).map(|r| r.1 - r.0);
        let into = match (left, right) {
            (Some(l), Some(r)) => {
                if l >= r {
                    i - 1
                } else {
                    i + 1
                }
            }
            (Some(_), None) => i - 1,
            _ => i + 1,
        };
        let (a, b) = (runs[i].0.min(runs[into].0), runs[i].1.max(runs[into].1));
        let id = runs[into].2;
        let lo = i.min(into);
        runs.splice(lo..lo + 2, [(a, b, id)]);
    }
}

/// Moves each boundary between two runs to the step that best separates their periods, within
/// two windows of where it is.
fn refine_boundaries(ts: &[i64], counts: &[u32], per: &[f64], runs: &mut [(usize, usize, i64)]) {
    for b in 1..runs.len() {
        let (a0, a1) = (runs[b - 1].0, runs[b - 1].1);
        let (b0, b1) = (runs[b].0, runs[b].1);
        let (Some(pl), Some(pr)) = (
            period_of(&ts[a0..=a1], &counts[a0..=a1]),
            period_of(&ts[b0..=b1], &counts[b0..=b1]),
        ) else {
            continue;
        };
        let lo = b0.saturating_sub(2 * WINDOW).max(a0 + 1);
        let hi = (b0 + 2 * WINDOW).min(b1 - 1);
        let cost = |u: f64, p: f64| (u.max(1.0) / p).ln().abs();
        let mut best = (f64::INFINITY, b0);
        for k in lo..=hi {
            let c: f64 = (lo..k).map(|j| cost(per[j], pl)).sum::<f64>()
                + (k..=hi).map(|j| cost(per[j], pr)).sum::<f64>();
            if c < best.0 {
                best = (c, k);
            }
        }
        runs[b - 1].1 = best.1;
        runs[b].0 = best.1;
    }
}

/// Splits one entity's samples (`ts` sorted and distinct, `counts` raw samples per point) into
/// segments of one sampling period, each with its row length ([`bucket_for`] with `grid_ms` and
/// `min_ms`). `fallback_ms` is the period assumed for an entity with a single sample.
pub fn segments(
    ts: &[i64],
    counts: &[u32],
    grid_ms: i64,
    min_ms: i64,
    fallback_ms: f64,
) -> Vec<Segment> {
    let n = ts.len();
    if n == 0 {
        return Vec::new();
    }
    let whole = |start: usize, end: usize| -> Segment {
        let p = period_of(&ts[start..end], &counts[start..end]);
        Segment {
            start,
            end,
            period_ms: p,
            bucket_ms: bucket_for(p.unwrap_or(fallback_ms), grid_ms, min_ms),
        }
    };
    if n < 2 * WINDOW + 2 {
        return vec![whole(0, n)];
    }
    let per: Vec<f64> = (1..n)
        .map(|i| (ts[i] - ts[i - 1]) as f64 / f64::from(counts[i].max(1)))
        .collect();
    // A regular series (every step within 1.5× of the median, no gap) is one segment: skip the
    // rolling estimate.
    let m = median(&per);
    if per.iter().all(|&p| p <= 1.5 * m && p >= m / 1.5) {
        return vec![whole(0, n)];
    }
    // Runs change only when the rolling estimate moves away from the run's own by more than a
    // factor of 1.5 either way (hysteresis: a few missed scrapes in a window move it by
    // ~10–20%, a real change of period by 2× or more).
    let local = rolling_periods(ts, counts, &per, fallback_ms);
    let mut runs: Vec<(usize, usize, i64)> = Vec::new(); // (first step, one past last, id)
    let mut reference = local[0];
    for (k, &p) in local.iter().enumerate() {
        let r = p / reference;
        match runs.last_mut() {
            Some(run) if (1.0 / 1.5..=1.5).contains(&r) => run.1 = k + 1,
            _ => {
                let id = runs.len() as i64;
                runs.push((k, k + 1, id));
                reference = p;
            }
        }
    }
    merge_short_runs(&mut runs);
    // Each boundary moves to the step that best separates the two periods: the rolling
    // estimate lags a change by up to a window.
    refine_boundaries(ts, counts, &per, &mut runs);
    // Step runs → sample ranges: step k joins samples k and k+1; sample 0 goes with the first
    // run, sample k+1 with the run of step k.
    let mut out: Vec<Segment> = Vec::with_capacity(runs.len());
    for (i, r) in runs.iter().enumerate() {
        let start = if i == 0 { 0 } else { r.0 + 1 };
        let end = r.1 + 1;
        let seg = whole(start, end);
        match out.last_mut() {
            Some(last) if last.bucket_ms == seg.bucket_ms => *last = whole(last.start, end),
            _ => out.push(seg),
        }
    }
    out
}

/// Row end and row length for every sample of one entity (`ts` sorted and distinct), given its
/// segments: the row `(end − length, end]` of the segment's length; a row never starts before the
/// previous row's end (the first row after a change of period is shortened, and a sample that
/// falls into the previous segment's last row joins it).
pub fn assign(ts: &[i64], segs: &[Segment]) -> Vec<(i64, i64)> {
    let mut out = Vec::with_capacity(ts.len());
    let mut last: Option<(i64, i64)> = None;
    for s in segs {
        for &t in &ts[s.start..s.end] {
            let e = row_end(t, s.bucket_ms);
            let row = match last {
                Some((le, liv)) if e <= le => (le, liv),
                Some((le, _)) => (e, s.bucket_ms.min(e - le)),
                None => (e, s.bucket_ms),
            };
            out.push(row);
            last = Some(row);
        }
    }
    out
}

/// Of `ts` (sorted, distinct), the share of `step_ms` rows between the first and the last
/// sample that hold no sample: what a row length finer than the data would leave empty.
pub fn empty_share(ts: &[i64], step_ms: i64) -> (u64, u64) {
    let (Some(&a), Some(&b)) = (ts.first(), ts.last()) else {
        return (0, 0);
    };
    let step = step_ms.max(1);
    let total = ((row_end(b, step) - row_end(a, step)) / step + 1) as u64;
    let mut held = 0u64;
    let mut prev: Option<i64> = None;
    for &t in ts {
        let e = row_end(t, step);
        if prev != Some(e) {
            held += 1;
            prev = Some(e);
        }
    }
    (total - held.min(total), total)
}

/// "57 s", "60 s", "2 min", "5 min", "1.5 h", "250 ms".
pub fn fmt_period(ms: f64) -> String {
    if ms < 1000.0 {
        format!("{ms:.0} ms")
    } else if ms < 120_000.0 {
        let s = ms / 1000.0;
        if (s - s.round()).abs() < 0.05 {
            format!("{s:.0} s")
        } else {
            format!("{s:.1} s")
        }
    } else if ms < 3_600_000.0 {
        let m = ms / 60_000.0;
        if (m - m.round()).abs() < 0.01 {
            format!("{m:.0} min")
        } else {
            format!("{:.0} s", ms / 1000.0)
        }
    } else {
        let h = ms / 3_600_000.0;
        if (h - h.round()).abs() < 0.01 {
            format!("{h:.0} h")
        } else {
            format!("{h:.1} h")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ones(n: usize) -> Vec<u32> {
        vec![1; n]
    }

    #[test]
    fn buckets_are_standard_steps_never_finer_than_the_data() {
        assert_eq!(bucket_for(57_000.0, 1, 0), 60_000);
        assert_eq!(bucket_for(60_000.0, 1, 0), 60_000);
        assert_eq!(bucket_for(63_000.0, 1, 0), 60_000); // 5% missed scrapes
        assert_eq!(bucket_for(15_000.0, 1, 0), 15_000);
        assert_eq!(bucket_for(1_000.0, 1, 0), 1_000);
        assert_eq!(bucket_for(300_000.0, 1, 0), 300_000);
        assert_eq!(bucket_for(45_000.0, 1, 0), 60_000);
        // An explicit interval coarser than the data wins; finer does not.
        assert_eq!(bucket_for(15_000.0, 1, 60_000), 60_000);
        assert_eq!(bucket_for(60_000.0, 1, 10_000), 60_000);
        assert_eq!(bucket_for(10_000.0, 1, 45_000), 45_000);
        // On a 10 s grid, 15 s data gets 20 s rows (15 s rows would alternate 0 and 2 points).
        assert_eq!(bucket_for(15_000.0, 10_000, 0), 20_000);
        assert_eq!(bucket_for(15_000.0, 15_000, 0), 15_000);
        // Beyond the table: whole days.
        assert_eq!(bucket_for(2.5 * 86_400_000.0, 1, 0), 3 * 86_400_000);
    }

    #[test]
    fn rows_are_left_open_right_closed() {
        assert_eq!(row_end(60_000, 60_000), 60_000);
        assert_eq!(row_end(60_001, 60_000), 120_000);
        assert_eq!(row_end(1, 60_000), 60_000);
        assert_eq!(row_end(0, 60_000), 0);
        assert_eq!(row_end(-1, 60_000), 0);
    }

    #[test]
    fn period_ignores_outages_counts_missed_scrapes_and_aliasing() {
        // 60 s with one missed scrape and a 2 h outage.
        let mut ts: Vec<i64> = (0..100).map(|i| i * 60_000).collect();
        ts.remove(50);
        let last = *ts.last().unwrap();
        ts.extend((1..50).map(|i| last + 7_200_000 + i * 60_000));
        let p = period_of(&ts, &ones(ts.len())).unwrap();
        assert!((60_000.0..61_000.0).contains(&p), "{p}");
        // 15 s samples on a 10 s grid: steps of 10 and 20 s.
        let grid: Vec<i64> = (1..200).map(|i| row_end(i * 15_000, 10_000)).collect();
        let p = period_of(&grid, &ones(grid.len())).unwrap();
        assert!((p - 15_000.0).abs() < 200.0, "{p}");
        // Points holding several samples (a 60 s grid over 20 s data): 20 s.
        let ts: Vec<i64> = (0..50).map(|i| i * 60_000).collect();
        assert_eq!(period_of(&ts, &[3; 50]).unwrap(), 20_000.0);
        assert_eq!(period_of(&[5], &[1]), None);
    }

    #[test]
    fn a_series_that_changes_period_gets_two_segments() {
        // 15 s for an hour, then 60 s for an hour, with ±20% jitter.
        let mut ts: Vec<i64> = (0..240)
            .map(|i| i * 15_000 + ((i * 7919) % 7 - 3) * 1_000)
            .collect();
        let t0 = 3_600_000;
        ts.extend((1..60).map(|i| t0 + i * 60_000 + ((i * 104_729) % 25 - 12) * 1_000));
        let segs = segments(&ts, &ones(ts.len()), 1, 0, 10_000.0);
        assert_eq!(segs.len(), 2, "{segs:?}");
        assert_eq!(
            (segs[0].bucket_ms, segs[1].bucket_ms),
            (15_000, 60_000),
            "{segs:?}"
        );
        let switch = segs[1].start;
        assert!((235..=242).contains(&switch), "{segs:?}");
        // Rows: ends non-decreasing, never overlapping.
        let rows = assign(&ts, &segs);
        let mut prev_end = i64::MIN;
        for w in rows.windows(2) {
            assert!(w[0].0 <= w[1].0);
            if w[0].0 != w[1].0 {
                assert!(w[1].0 - w[1].1 >= w[0].0, "{w:?}");
            }
            prev_end = prev_end.max(w[1].0);
        }
        for (t, (e, iv)) in ts.iter().zip(&rows) {
            assert!(*t <= *e && *t > e - iv, "{t} not in ({}, {e}]", e - iv);
        }
    }

    #[test]
    fn regular_series_with_jitter_and_misses_is_one_segment() {
        for period in [1_000i64, 10_000, 15_000, 30_000, 60_000, 300_000] {
            let mut ts: Vec<i64> = Vec::new();
            for i in 0..2_000i64 {
                if (i * 2_654_435_761) % 100 < 5 {
                    continue; // 5% missed
                }
                let jitter = ((i * 40_503) % 41 - 20) * period / 100; // ±20%
                ts.push(1_000_000_000 + i * period + jitter);
            }
            let segs = segments(&ts, &ones(ts.len()), 1, 0, 10_000.0);
            assert_eq!(segs.len(), 1, "{period}: {segs:?}");
            assert_eq!(segs[0].bucket_ms, period, "{period}: {segs:?}");
        }
    }

    #[test]
    fn empty_share_of_a_finer_step() {
        let ts: Vec<i64> = (1..=60).map(|i| i * 60_000).collect();
        let (empty, total) = empty_share(&ts, 10_000);
        assert_eq!(total, 355);
        assert_eq!(empty, 355 - 60);
        assert_eq!(fmt_period(57_000.0), "57 s");
        assert_eq!(fmt_period(300_000.0), "5 min");
        assert_eq!(fmt_period(500.0), "500 ms");
    }
}
