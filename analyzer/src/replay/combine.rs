//! The replay's model (docs/replay.md, "Model"), interval by interval:
//!
//! - **Intervals.** A placement's workloads are put on one grid: the longest of their median
//!   row lengths (`step`); a row ending at `ts` belongs to the interval ending at
//!   `ceil(ts / step) · step`. Within an interval a workload's memory is the most of its rows,
//!   its activity their mean. A placement of a config is judged only in the intervals whose
//!   middle that config is in force (the schedule, in its time zone).
//! - **Memory.** Combined memory = the sum of the workloads' memory. Exceeded (would have
//!   failed) where it is above the target's memory: a MIG profile's, a whole GPU's, or for a
//!   consolidation host its full memory (each GPU's measured memory, driver reserve included,
//!   is moved: a little pessimistic).
//! - **Compute.** Activity is in compute slices (activity × the slices it was measured on), so
//!   a workload measured at 50% of a 3-slice instance asks 1.5 slices of a 1-slice one.
//!   Contention where the combined demand is above the target's slices; the slowdown there is
//!   proportional sharing: each workload gets capacity ÷ demand of what it asks, so its work
//!   takes demand ÷ capacity as long.
//! - **Verdicts.** `unsafe`: memory exceeded in any interval (or a loaded workload without a
//!   place under the config in force); `tight`: p99 memory above
//!   [`super::TIGHT_MEMORY_SHARE`] of the capacity, or contention in more
//!   than [`super::TIGHT_CONTENTION_SHARE`] of the intervals; else
//!   `safe`. The plan's verdict is its worst placement's.
//! - **Fleet.** GPUs before: the GPUs the plan's workloads (and moves) ran on; after: the GPUs a
//!   config in force gives a workload, and the consolidation hosts, weighted by the time each
//!   config is in force. Allocation: GPU-hours holding a loaded workload (after: a target's
//!   share of its GPU) ÷ GPU-hours. Work utilization: the workloads' activity in GPUs × hours
//!   ÷ GPU-hours (the same work before and after). Energy: the GPUs' measured energy before;
//!   after, the same minus each freed GPU's idle power (the 5th percentile of its mean power)
//!   over the hours it is freed — the work's own energy moves with it.
//!
//! Pure: the rows and targets in, figures out.

use std::collections::{BTreeMap, BTreeSet};

use tessera_core::mig::plan_sections::WorkloadSource;

use super::series::{Extracted, GpuStat, MIN_MEMORY_BYTES, Point, known};
use super::targets::{Target, Targets};
use super::{
    FleetResult, PlacementResult, Replay, ReplayRequest, Span, TIGHT_CONTENTION_SHARE,
    TIGHT_MEMORY_SHARE, Thresholds, Trained, WorkloadResult,
};
use crate::range::TimeRange;
use crate::stats::quantile;
use crate::times::fmt_ms;

const HOUR_MS: f64 = 3_600_000.0;
/// The data's GPUs by (node, index).
type Gpus = BTreeMap<(String, u32), GpuStat>;
/// How many spans of a kind a placement lists (the count covers them all).
const MAX_SPANS: usize = 50;

/// Spans of consecutive intervals, from `(end, length)` in time order; at most `MAX_SPANS`.
pub fn spans(ends: &[(i64, i64)]) -> Vec<Span> {
    let mut out: Vec<(i64, i64, u64)> = Vec::new();
    for &(end, len) in ends {
        match out.last_mut() {
            Some(s) if end - len <= s.1 => {
                s.1 = end;
                s.2 += 1;
            }
            _ => out.push((end - len, end, 1)),
        }
    }
    out.into_iter()
        .take(MAX_SPANS)
        .map(|(f, u, n)| Span {
            from: fmt_ms(f),
            until: fmt_ms(u),
            intervals: n,
        })
        .collect()
}

/// The median row length of a series, ms.
fn median_len(pts: &[Point]) -> i64 {
    let mut l: Vec<i64> = pts.iter().map(Point::length).filter(|&l| l > 0).collect();
    if l.is_empty() {
        return 0;
    }
    let mid = l.len() / 2;
    *l.select_nth_unstable(mid).1
}

/// One interval of a placement: memory and activity of each workload combined (NaN: unknown).
#[derive(Clone, Copy)]
struct Cell {
    mem: f64,
    act: f64,
    loaded: bool,
}

impl Default for Cell {
    fn default() -> Cell {
        Cell {
            mem: f64::NAN,
            act: f64::NAN,
            loaded: false,
        }
    }
}

/// One workload's intervals on a grid of `step` from its rows in time order: (end, most
/// memory, sum of activity, rows with activity).
fn bins(pts: &[Point], step: i64) -> Vec<(i64, f64, f64, u32)> {
    let mut out: Vec<(i64, f64, f64, u32)> = Vec::new();
    for p in pts {
        let b = (p.ts + step - 1).div_euclid(step) * step;
        if out.last().is_none_or(|l| l.0 != b) {
            out.push((b, f64::NAN, 0.0, 0));
        }
        if let Some(e) = out.last_mut() {
            if let Some(v) = p.mem() {
                e.1 = e.1.max(v);
            }
            if let Some(a) = p.act() {
                e.2 += a;
                e.3 += 1;
            }
        }
    }
    out
}

/// A target's combined intervals in time order, in force only; `members` are its workloads'
/// rows, each in time order. Each workload's intervals are merged into the combined ones in
/// the order of the members (sort and merge, no map per interval).
fn cells(t: &Target, ts: &Targets, members: &[&[Point]]) -> (i64, Vec<(i64, Cell)>) {
    let step = members
        .iter()
        .map(|s| median_len(s))
        .max()
        .unwrap_or(0)
        .max(1);
    let mut out: Vec<(i64, Cell)> = Vec::new();
    for pts in members {
        let own = bins(pts, step);
        if own.is_empty() {
            continue;
        }
        let mut merged: Vec<(i64, Cell)> = Vec::with_capacity(out.len().max(own.len()));
        let mut prev = out.into_iter().peekable();
        for (b, mem, a, n) in own {
            while let Some(x) = prev.next_if(|x| x.0 < b) {
                merged.push(x);
            }
            let mut c = prev
                .next_if(|x| x.0 == b)
                .map_or_else(Cell::default, |x| x.1);
            c.mem = super::series::add_raw(c.mem, mem);
            if n > 0 {
                c.act = known(c.act).unwrap_or(0.0) + a / f64::from(n);
            }
            c.loaded |= known(mem).unwrap_or(0.0) >= MIN_MEMORY_BYTES;
            merged.push((b, c));
        }
        merged.extend(prev);
        out = merged;
    }
    if let Some(c) = &t.config {
        out.retain(|&(b, _)| ts.config_at(b - step / 2) == Some(c.as_str()));
    }
    (step, out)
}

/// The verdict on a target with `n` intervals replayed: unknown with none, unsafe when memory
/// went past `capacity` in `exceeded` intervals, tight when its p99 memory share or its share of
/// intervals with compute contention is above its bound, else safe; with the reasons.
fn verdict(
    n: u64,
    capacity: f64,
    exceeded: usize,
    p99_share: Option<f64>,
    contention_share: f64,
) -> (Option<&'static str>, Vec<String>) {
    let mut reasons = Vec::new();
    let verdict = if n == 0 {
        reasons.push("none of its workloads was seen in the replayed range: unknown".into());
        None
    } else if exceeded > 0 {
        reasons.push(format!(
            "memory above the {:.2} GiB of the target in {} interval(s)",
            capacity / GIB,
            exceeded
        ));
        Some("unsafe")
    } else {
        let p = p99_share.unwrap_or(0.0);
        if p > TIGHT_MEMORY_SHARE {
            reasons.push(format!(
                "p99 memory {:.0}% of the target's, above {:.0}%",
                p * 100.0,
                TIGHT_MEMORY_SHARE * 100.0
            ));
        }
        if contention_share > TIGHT_CONTENTION_SHARE {
            reasons.push(format!(
                "compute contention in {:.1}% of the intervals, above {:.0}%",
                contention_share * 100.0,
                TIGHT_CONTENTION_SHARE * 100.0
            ));
        }
        Some(if reasons.is_empty() { "safe" } else { "tight" })
    };
    (verdict, reasons)
}

/// One placement judged from its workloads' rows (`members`, each in time order, in the order
/// of `t.members`); also its allocated GPU-hours (its share of its GPU while loaded).
pub fn judge(
    t: &Target,
    ts: &Targets,
    members: &[&[Point]],
    gpus: &Gpus,
) -> (PlacementResult, f64) {
    let (step, cells) = cells(t, ts, members);
    let capacity = t
        .memory_bytes
        .map(|b| b as f64)
        .or_else(|| {
            t.node
                .as_ref()
                .and_then(|n| gpus.get(&(n.clone(), t.gpu)))
                .and_then(|g| g.memory_total)
        })
        .unwrap_or(0.0);
    let slices = f64::from(t.slices.max(1));
    let hours = step as f64 / HOUR_MS;
    let mut mems: Vec<f64> = cells.iter().filter_map(|(_, c)| known(c.mem)).collect();
    let peak = mems
        .iter()
        .copied()
        .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
    let p99 = quantile(&mut mems, 0.99);
    let mut exceeded = Vec::new();
    let mut contention = Vec::new();
    let mut slow = Vec::new();
    let mut allocated = 0.0;
    for &(b, c) in &cells {
        if known(c.mem).is_some_and(|m| m > capacity) {
            exceeded.push((b, step));
        }
        if let Some(a) = known(c.act)
            && a > slices * (1.0 + 1e-9)
        {
            contention.push((b, step));
            slow.push(a / slices);
        }
        if c.loaded {
            allocated += hours * slices / f64::from(t.gpu_slices.max(1));
        }
    }
    let n = cells.len() as u64;
    let share = |v: Option<f64>| v.filter(|_| capacity > 0.0).map(|v| v / capacity);
    let contention_share = if n > 0 {
        contention.len() as f64 / n as f64
    } else {
        0.0
    };
    let (verdict, reasons) = verdict(n, capacity, exceeded.len(), share(p99), contention_share);
    let r = PlacementResult {
        id: t.id.clone(),
        config: t.config.clone(),
        kind: t.kind,
        node: t.node.clone(),
        gpu: t.gpu,
        model: t.model.clone(),
        profile: t.profile.clone(),
        capacity_memory_bytes: capacity as u64,
        capacity_slices: t.slices,
        workloads: t.members.iter().chain(&t.placeholders).cloned().collect(),
        intervals: n,
        interval_seconds: step as f64 / 1000.0,
        peak_memory_bytes: peak.map(|v| v as u64),
        p99_memory_bytes: p99.map(|v| v as u64),
        peak_memory_share: share(peak),
        p99_memory_share: share(p99),
        exceeded_intervals: exceeded.len() as u64,
        exceeded_hours: exceeded.len() as f64 * hours,
        exceeded: spans(&exceeded),
        contention_intervals: contention.len() as u64,
        contention_hours: contention.len() as f64 * hours,
        contention: spans(&contention),
        slowdown_mean: (!slow.is_empty()).then(|| slow.iter().sum::<f64>() / slow.len() as f64),
        slowdown_max: slow.iter().copied().reduce(f64::max),
        verdict,
        reasons,
    };
    (r, allocated)
}

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// The share of `range` each config of `t` is in force, sampled each minute at its middle (empty
/// without configs).
fn config_shares(t: &Targets, range: TimeRange) -> BTreeMap<String, f64> {
    let mut shares: BTreeMap<String, f64> = BTreeMap::new();
    if !t.configs.is_empty() {
        let mut n = 0u64;
        let mut at = range.since + 30_000;
        while at <= range.until {
            if let Some(c) = t.config_at(at) {
                *shares.entry(c.to_string()).or_default() += 1.0;
            }
            n += 1;
            at += 60_000;
        }
        for v in shares.values_mut() {
            *v /= n.max(1) as f64;
        }
    }
    shares
}

/// The replay's verdict: unsafe when a placement is or a workload had no place while loaded,
/// tight when a placement is, else safe; with the placements and workloads that decide it.
fn overall_verdict(
    placements: &[PlacementResult],
    workloads: &[WorkloadResult],
) -> (&'static str, Vec<String>) {
    let mut deciding = Vec::new();
    let mut verdict = "safe";
    for p in placements {
        match p.verdict {
            Some("unsafe") => {
                verdict = "unsafe";
                deciding.push(format!(
                    "{}: memory exceeded in {} interval(s) ({:.2} h): {}",
                    p.id,
                    p.exceeded_intervals,
                    p.exceeded_hours,
                    span_text(&p.exceeded)
                ));
            }
            Some("tight") => {
                if verdict == "safe" {
                    verdict = "tight";
                }
                let mut s = format!("{}: {}", p.id, p.reasons.join("; "));
                if p.contention_intervals > 0 {
                    s.push_str(&format!(": contention {}", span_text(&p.contention)));
                }
                deciding.push(s);
            }
            _ => {}
        }
    }
    for w in workloads {
        if w.unplaced_intervals > 0 {
            verdict = "unsafe";
            deciding.push(format!(
                "{}: loaded in {} interval(s) when the config in force gives it no place: {}",
                w.id,
                w.unplaced_intervals,
                span_text(&w.unplaced)
            ));
        }
    }
    (verdict, deciding)
}

/// The whole replay from its parts (`super::stream` judges them as the rows arrive):
/// `placements` (each with its allocated GPU-hours) in the order of `t.targets`, `workloads` in
/// the order of `t.sources`, and `work`, the placed workloads' activity in GPU-hours.
pub fn replay(
    t: &Targets,
    ex: &Extracted,
    judged: Vec<(PlacementResult, f64)>,
    workloads: Vec<WorkloadResult>,
    work: f64,
    req: &ReplayRequest,
) -> Replay {
    let range = req.range;
    let hours = range.len_ms() as f64 / HOUR_MS;
    let shares = config_shares(t, range);
    let mut placements = Vec::with_capacity(judged.len());
    let mut allocated_after = 0.0;
    for (r, a) in judged {
        allocated_after += a;
        placements.push(r);
    }
    // A target holds work after the plan when some workload of it was seen in the range (or it
    // holds a placeholder such as the night's training); out of sample, a target whose
    // workloads are all gone holds nothing.
    let holding: Vec<bool> = t
        .targets
        .iter()
        .zip(&placements)
        .map(|(tg, p)| !tg.placeholders.is_empty() || p.verdict.is_some())
        .collect();
    let fleet = fleet(
        t,
        ex,
        req,
        (hours, work),
        &shares,
        allocated_after,
        &holding,
    );

    let (verdict, deciding) = overall_verdict(&placements, &workloads);
    let failed_intervals = placements.iter().map(|p| p.exceeded_intervals).sum::<u64>()
        + workloads.iter().map(|w| w.unplaced_intervals).sum::<u64>();
    let mut notes = t.notes.clone();
    for w in &workloads {
        if !w.seen {
            notes.push(format!(
                "{}: not seen in the replayed range (unknown, not 0)",
                w.id
            ));
        }
    }
    Replay {
        version: super::REPLAY_JSON_VERSION,
        kind: "tessera-replay",
        plan: req.plan_file.clone(),
        from: fmt_ms(range.since),
        until: fmt_ms(range.until),
        sources: req.sources.clone(),
        trained_on: req.trained.as_ref().map(|(r, k)| Trained {
            from: fmt_ms(r.since),
            until: fmt_ms(r.until),
            planner: k.clone(),
        }),
        configs: shares,
        verdict,
        deciding,
        failed_intervals,
        thresholds: Thresholds {
            tight_memory_share: TIGHT_MEMORY_SHARE,
            tight_contention_share: TIGHT_CONTENTION_SHARE,
        },
        placements,
        workloads,
        fleet,
        notes,
    }
}

/// The first spans as text (`from .. until`, and how many more).
pub fn span_text(spans: &[Span]) -> String {
    let mut s: Vec<String> = spans
        .iter()
        .take(3)
        .map(|s| format!("{} .. {}", s.from, s.until))
        .collect();
    if spans.len() > 3 {
        s.push(format!("and {} more span(s)", spans.len() - 3));
    }
    s.join(", ")
}

/// One workload as the replay found it, from its rows in time order; `in_configs`: it is judged
/// against the configs in force (an interval in which it holds memory and the config in force
/// gives it no place is a failed interval).
pub fn workload_result(
    t: &Targets,
    id: &str,
    s: &WorkloadSource,
    pts: &[Point],
    in_configs: bool,
) -> WorkloadResult {
    let seen = !pts.is_empty();
    let mut unplaced = Vec::new();
    if in_configs {
        for p in pts {
            if p.mem().unwrap_or(0.0) < MIN_MEMORY_BYTES {
                continue;
            }
            let placed = t
                .config_at(p.ts - p.length() / 2)
                .and_then(|c| t.placed.get(c))
                .is_some_and(|m| m.contains_key(id));
            if !placed {
                unplaced.push((p.ts, p.length()));
            }
        }
    }
    WorkloadResult {
        id: id.to_string(),
        kind: s.kind.as_str(),
        node: s.node.clone(),
        gpu: s.gpu,
        seen,
        rows: pts.len() as u64,
        peak_memory_bytes: pts
            .iter()
            .filter_map(Point::mem)
            .reduce(f64::max)
            .map(|v| v as u64),
        unplaced_intervals: unplaced.len() as u64,
        unplaced: spans(&unplaced),
        note: (!seen).then(|| "not seen in the replayed range".to_string()),
    }
}

/// A workload's work: its activity in GPUs × hours (`gpu_slices`: its whole GPU's slices).
pub fn work(pts: &[Point], gpu_slices: Option<f64>) -> f64 {
    let slices = gpu_slices.unwrap_or(7.0).max(1.0);
    pts.iter()
        .filter_map(|p| p.act().map(|a| a / slices * p.length() as f64 / HOUR_MS))
        .sum::<f64>()
}

/// The GPUs in use after the plan, each set with the share of the range it holds: per config
/// in force its targets holding work, with the hosts (which are always in use); just the hosts,
/// all the time, without configs.
fn gpus_in_use(
    t: &Targets,
    shares: &BTreeMap<String, f64>,
    holding: &[bool],
) -> Vec<(f64, BTreeSet<(String, u32)>)> {
    let hosts: BTreeSet<(String, u32)> = t
        .targets
        .iter()
        .filter(|tg| tg.config.is_none())
        .filter_map(|tg| tg.node.clone().map(|n| (n, tg.gpu)))
        .collect();
    // GPUs in use under each config (hosts always).
    let mut after: BTreeMap<String, BTreeSet<(String, u32)>> = BTreeMap::new();
    for (k, tg) in t.targets.iter().enumerate() {
        if let (Some(c), Some(n)) = (&tg.config, &tg.node)
            && !(tg.members.is_empty() && tg.placeholders.is_empty())
            && holding.get(k).copied().unwrap_or(true)
        {
            after
                .entry(c.clone())
                .or_default()
                .insert((n.clone(), tg.gpu));
        }
    }
    if shares.is_empty() {
        vec![(1.0, hosts.clone())]
    } else {
        shares
            .iter()
            .map(|(c, s)| {
                let mut g = after.get(c).cloned().unwrap_or_default();
                g.extend(hosts.iter().cloned());
                (*s, g)
            })
            .collect()
    }
}

fn fleet(
    t: &Targets,
    ex: &Extracted,
    req: &ReplayRequest,
    (hours, work): (f64, f64),
    shares: &BTreeMap<String, f64>,
    allocated_after: f64,
    holding: &[bool],
) -> FleetResult {
    let before: BTreeSet<(String, u32)> = t
        .sources
        .values()
        .map(|s| (s.node.clone(), s.gpu))
        .filter(|k| ex.gpus.contains_key(k))
        .collect();
    let weighted = gpus_in_use(t, shares, holding);
    let gpus_after = weighted.iter().map(|(_, g)| g.len()).max().unwrap_or(0);
    let gpu_hours_before = before.len() as f64 * hours;
    let gpu_hours_after: f64 = weighted
        .iter()
        .map(|(s, g)| s * g.len() as f64 * hours)
        .sum();
    let freed = (gpu_hours_before - gpu_hours_after).max(0.0);
    let ratio = |num: f64, den: f64| (den > 0.0).then(|| num / den);
    let loaded_before: f64 = before
        .iter()
        .filter_map(|k| ex.gpus.get(k))
        .map(|g| g.loaded_ms as f64 / HOUR_MS)
        .sum();
    // Energy: summed over the rows that have power or energy, with the share of rows that do
    // (one GPU lost for two hours no longer blanks the line).
    let (rows, with_power) = before
        .iter()
        .filter_map(|k| ex.gpus.get(k))
        .fold((0u64, 0u64), |(r, p), g| {
            (r + g.rows, p + g.rows.saturating_sub(g.rows_without_power))
        });
    let coverage = (rows > 0 && with_power > 0).then(|| with_power as f64 / rows as f64);
    let known = !before.is_empty() && coverage.is_some();
    let (energy_before, energy_after) = if known {
        let joules: f64 = before
            .iter()
            .filter_map(|k| ex.gpus.get(k))
            .map(|g| g.joules)
            .sum();
        let mut saved_wh = 0.0;
        for k in &before {
            let used: f64 = weighted
                .iter()
                .filter(|(_, g)| g.contains(k))
                .map(|(s, _)| s)
                .sum();
            let Some(g) = ex.gpus.get(k) else { continue };
            saved_wh += g.idle_watts * (1.0 - used).max(0.0) * hours;
        }
        let before_kwh = joules / 3.6e6;
        (
            Some(before_kwh),
            Some((before_kwh - saved_wh / 1000.0).max(0.0)),
        )
    } else {
        (None, None)
    };
    let count = crate::mig_planner::GpuCount::new(before.len() as u32, gpus_after as u32);
    FleetResult {
        hours,
        gpus_before: count.before,
        gpus_after: count.after,
        gpus_freed: count.freed,
        gpu_hours_before,
        gpu_hours_after,
        gpu_hours_freed: freed,
        cost_freed: freed * req.prices.gpu_hour,
        currency: req.prices.currency.clone(),
        price_gpu_hour: req.prices.gpu_hour,
        allocation_before: ratio(loaded_before, gpu_hours_before).map(|v| v.min(1.0)),
        allocation_after: ratio(allocated_after, gpu_hours_after).map(|v| v.min(1.0)),
        utilization_before: ratio(work, gpu_hours_before),
        utilization_after: ratio(work, gpu_hours_after),
        energy_kwh_before: energy_before,
        energy_kwh_after: energy_after,
        energy_coverage: coverage.map(|c| (c * 1000.0).round() / 1000.0),
        energy_model: if known {
            "measured energy of the GPUs before (energy counter, else mean power × time); after, minus each freed GPU's idle power (5th percentile of its mean power) over the hours it is freed; the work's own energy moves with it".into()
        } else {
            "unknown: some GPU of the plan has rows without power or energy".into()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_merge_consecutive_intervals_only() {
        let s = spans(&[(600, 300), (900, 300), (1500, 300), (1800, 300)]);
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].intervals, s[1].intervals), (2, 2));
        assert_eq!(s[0].from, fmt_ms(300));
        assert_eq!(s[1].until, fmt_ms(1800));
        assert!(spans(&[]).is_empty());
    }

    #[test]
    fn median_len_ignores_empty_rows() {
        let p = |len| Point::new(0, len, None, None);
        assert_eq!(
            median_len(&[p(0), p(60_000), p(60_000), p(300_000)]),
            60_000
        );
        assert_eq!(median_len(&[]), 0);
    }
}
