//! The report's tallies, one node partition at a time: usage (fleet, previous period, by node,
//! by model), teams, charts and the per-GPU data-quality notes are folded over the partitions
//! in key order ([`build_parts`]), so that memory holds one partition's rows, not the fleet's.
//!
//! The result is the one a single pass over the union of the partitions gives, byte for byte:
//! partitions are keyed by node and come in node order, and the report reads rows in (node, GPU
//! index, model, `ts`) order, so every sum adds the same numbers in the same order. Where that
//! does not hold (a node in two partitions, GPUs out of order) [`build_parts`] builds over the
//! union instead, as one partition.
//!
//! Quantiles of groups that span partitions (fleet, previous period, GPU model) are exact, from
//! a histogram of 2^20 equal buckets over 0–1 (values outside, NaN and −0 are kept exactly, by
//! value): the rank's bucket decides the reported (3-decimal) value unless the bucket straddles a
//! rounding boundary; then a second pass reads the values of that bucket only. A node's and a
//! GPU's quantiles are taken from their values (one partition holds them). docs/report.md says
//! so.
//!
//! This module reads the lazy frames it is given and nothing else; it does not price findings
//! or plan MIG layouts (see the parent module).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};

use chrono_tz::Tz;

use super::*;
use crate::frames::Frames;
use crate::frames::shared::PartIds;
use crate::times::fmt_ms;

mod energy;
mod gpus;
mod hist;
mod rows;
mod teams;
#[cfg(test)]
mod tests;
mod usage;
mod week;

use energy::{EnergyAcc, GpuIdle, TeamEnergy, gpu_walk, team_energy};
use gpus::{free_counts, gpu_activity, gpu_notes};
use hist::bucket_of;
pub(crate) use rows::{GPU_COLUMNS, PROCESS_COLUMNS};
use rows::{Gpu, Row, gpu_rows};
use teams::{TeamRows, TeamsAcc, team_rows};
use usage::UsageAcc;
pub(crate) use week::{WeekPart, week_part};

/// Everything summed over the partitions so far.
struct Tally {
    range: (i64, i64),
    /// GPUs of every partition read so far, in report order.
    gpus: Vec<Gpu>,
    nodes: HashSet<String>,
    sources: BTreeSet<String>,
    n_sm: u64,
    n_busy: u64,
    fleet: UsageAcc,
    previous: UsageAcc,
    has_previous: bool,
    by_node: Vec<Usage>,
    by_model: BTreeMap<String, UsageAcc>,
    teams: TeamsAcc,
    energy: EnergyAcc,
    hour_of_week: Vec<Vec<(f64, f64)>>,
    gpu_activity: Vec<GpuActivity>,
    timeline: Vec<(u32, u32)>,
    gpu_notes: Vec<QualityNote>,
    gaps: Vec<(String, usize, f64)>,
}

/// A partition's GPUs do not follow the previous partitions' in report order.
struct OutOfOrder;

impl Tally {
    fn new(range: (i64, i64)) -> Tally {
        let first_hour = range.0.div_euclid(3_600_000);
        let last_hour = (range.1 - 1).div_euclid(3_600_000);
        let nh = (last_hour - first_hour + 1).max(0) as usize;
        Tally {
            range,
            gpus: Vec::new(),
            nodes: HashSet::new(),
            sources: BTreeSet::new(),
            n_sm: 0,
            n_busy: 0,
            fleet: UsageAcc::new("fleet", false),
            previous: UsageAcc::new("previous", false),
            has_previous: false,
            by_node: Vec::new(),
            by_model: BTreeMap::new(),
            teams: TeamsAcc::default(),
            energy: EnergyAcc::default(),
            hour_of_week: vec![vec![(0.0, 0.0); 24]; 7],
            gpu_activity: Vec::new(),
            timeline: vec![(0, 0); nh],
            gpu_notes: Vec::new(),
            gaps: Vec::new(),
        }
    }

    /// Adds one partition's prepared rows; `Err(OutOfOrder)` when its GPUs do not come after
    /// the previous partitions' in report order (nothing was added then).
    fn fold(&mut self, p: Prepared) -> Result<(), OutOfOrder> {
        let start = self.range.0;
        // Report order across partitions: each partition's GPUs after the last one's, and no
        // node in two partitions.
        if let (Some(last), Some(first)) = (self.gpus.last(), p.gpus.first())
            && last.order() >= first.order()
        {
            return Err(OutOfOrder);
        }
        let local: BTreeSet<&str> = p.gpus.iter().map(|g| g.node.as_str()).collect();
        if local.iter().any(|n| self.nodes.contains(*n)) {
            return Err(OutOfOrder);
        }
        self.nodes.extend(local.into_iter().map(str::to_string));
        let base = self.gpus.len();
        self.sources.extend(p.gpus.iter().map(|g| g.source.clone()));
        let mut slots = p.slots.iter();
        // The model's accumulator, looked up once per GPU (rows come GPU by GPU).
        let mut model: Option<(usize, &mut UsageAcc)> = None;
        for r in &p.rows {
            if r.ts <= start {
                self.has_previous = true;
                self.previous.add(base + r.gpu, r);
                continue;
            }
            match r.activity() {
                Some(_) if r.sm => self.n_sm += 1,
                Some(_) => self.n_busy += 1,
                None => {}
            }
            let g = &p.gpus[r.gpu];
            self.fleet.add(base + r.gpu, r);
            let acc = match model {
                Some((gpu, acc)) if gpu == r.gpu => acc,
                _ => self
                    .by_model
                    .entry(g.model.clone())
                    .or_insert_with(|| UsageAcc::new(&g.model, false)),
            };
            acc.add(base + r.gpu, r);
            model = Some((r.gpu, acc));
            // Hour-of-week heatmap of mean activity (the row's start decides its hour).
            if let (Some(a), Some(Some((d, h)))) = (r.activity(), slots.next()) {
                let w = r.interval as f64;
                let (d, h) = (usize::from(*d), usize::from(*h));
                self.hour_of_week[d][h].0 += a * w;
                self.hour_of_week[d][h].1 += w;
            }
        }
        self.by_node.extend(p.by_node);
        self.gpu_activity.extend(p.gpu_activity);
        for (t, (g, f)) in self.timeline.iter_mut().zip(p.timeline) {
            t.0 += g;
            t.1 += f;
        }
        self.gpu_notes.extend(p.notes);
        self.gaps.extend(p.gaps);
        self.teams.fold(p.teams);
        self.energy.fold(p.energy, p.idle);
        self.gpus.extend(p.gpus);
        Ok(())
    }
}

/// One partition read and reduced as far as it can be alone (on a worker thread): its GPUs and
/// rows in report order, the hour-of-week slot of each current row, its nodes' usage (a node's
/// rows are all in one partition), its GPUs' charts and notes, its team rows.
struct Prepared {
    gpus: Vec<Gpu>,
    rows: Vec<Row>,
    /// Per current row (`ts` after the start), in order.
    slots: Vec<Option<(u8, u8)>>,
    by_node: Vec<Usage>,
    gpu_activity: Vec<GpuActivity>,
    timeline: Vec<(u32, u32)>,
    notes: Vec<QualityNote>,
    gaps: Vec<(String, usize, f64)>,
    teams: TeamRows,
    /// The energy split by team, and each GPU's idle rows.
    energy: TeamEnergy,
    idle: Vec<GpuIdle>,
}

/// Reads and reduces one partition; `(shared, in_range)`: what the caller holds of it (see
/// [`PartTally::add`]).
fn prepare(
    frames: &Frames,
    range: (i64, i64),
    tz: &Tz,
    hours: f64,
    prices: &Prices,
    (shared, in_range): (Option<&PartIds>, Option<&Frames>),
    energy_spent: &AtomicU64,
) -> Result<Prepared, ReportError> {
    let (start, end) = range;
    let len = (end - start).max(0);
    let (gpus, rows) = gpu_rows(
        frames,
        start - len + 1,
        end,
        shared.and_then(|s| s.whole(start - len + 1, end).gpu),
    )?;
    let cur: Vec<&Row> = rows.iter().filter(|r| r.ts > start).collect();
    let slots = super::charts::slots_of(cur.iter().map(|r| r.ts - r.interval), tz);
    // Per node (GPUs are in node order, so a node's accumulator is found by its GPU's index; the
    // nodes come out in the same order a map keyed by node gives).
    let mut node_of: Vec<usize> = Vec::with_capacity(gpus.len());
    let mut node_names: Vec<&str> = Vec::new();
    for g in &gpus {
        if node_names.last() != Some(&g.node.as_str()) {
            node_names.push(&g.node);
        }
        node_of.push(node_names.len() - 1);
    }
    let mut by_node: Vec<Option<UsageAcc>> = node_names.iter().map(|_| None).collect();
    for r in &cur {
        by_node[node_of[r.gpu]]
            .get_or_insert_with(|| UsageAcc::new(&gpus[r.gpu].node, true))
            .add(r.gpu, r);
    }
    let by_node = by_node
        .into_iter()
        .flatten()
        .map(|mut acc| {
            let p95 = acc.p95().unwrap_or(None);
            acc.finish(p95, hours, prices)
        })
        .collect();
    // Each GPU's rows: a run of `cur` (rows come GPU by GPU).
    let mut per: Vec<&[&Row]> = vec![&[]; gpus.len()];
    let mut from = 0;
    while from < cur.len() {
        let g = cur[from].gpu;
        let to = cur[from..]
            .iter()
            .position(|r| r.gpu != g)
            .map_or(cur.len(), |k| from + k);
        per[g] = &cur[from..to];
        from = to;
    }
    let gpu_activity = gpu_activity(&gpus, &per);
    let first_hour = start.div_euclid(3_600_000);
    let last_hour = (end - 1).div_euclid(3_600_000);
    let mut timeline = vec![(0, 0); (last_hour - first_hour + 1).max(0) as usize];
    free_counts(&cur, range, &mut timeline);
    let (mut notes, mut gaps) = (Vec::new(), Vec::new());
    gpu_notes(&gpus, &per, range, &mut notes, &mut gaps);
    let teams = team_rows(
        frames,
        range,
        shared.and_then(|s| s.whole(start + 1, end).process),
    )?;
    let t = std::time::Instant::now();
    let (idle, intervals) = gpu_walk(&gpus, &per);
    let energy = match in_range {
        Some(f) => team_energy(f, range, crate::energy::Held::InMemory, intervals)?,
        None => team_energy(frames, range, crate::energy::Held::Lazy, intervals)?,
    };
    energy_spent.fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
    drop(per);
    drop(cur);
    Ok(Prepared {
        gpus,
        rows,
        slots,
        by_node,
        gpu_activity,
        timeline,
        notes,
        gaps,
        teams,
        energy,
        idle,
    })
}

/// Partitions prepared ahead of the next one in order, at most (each holds its rows until it is
/// folded): [`PartTally::add`] waits beyond that.
const AHEAD: usize = 8;

/// The report's tallies built one partition at a time, from any number of threads: each
/// [`add`](PartTally::add) reads and reduces its partition on the calling thread, and the
/// partitions are folded in partition order (the one order that keeps the output byte-identical
/// to the union's). [`finish`](PartTally::finish) makes the report.
pub struct PartTally {
    range: (i64, i64),
    tz: Tz,
    hours: f64,
    prices: Prices,
    state: std::sync::Mutex<FoldState>,
    turn: std::sync::Condvar,
    /// Time spent in the energy split, summed over the workers (`TESSERA_TIMINGS`).
    energy_spent: AtomicU64,
}

struct FoldState {
    tally: Tally,
    /// The partition to fold next, and those prepared ahead of it.
    next: usize,
    pending: BTreeMap<usize, Prepared>,
    /// A partition's GPUs were not after the previous ones': [`PartTally::finish`] reads the
    /// union instead.
    out_of_order: bool,
    /// A partition failed: the others stop waiting.
    aborted: bool,
}

/// Aborts the tally when dropped before [`AbortGuard::disarm`] (an error or a panic on a worker),
/// so that no other worker waits for a partition that will not come.
pub struct AbortGuard<'a>(&'a PartTally, bool);

impl AbortGuard<'_> {
    /// The partition was added: nothing to abort.
    pub fn disarm(mut self) {
        self.1 = false;
    }
}

impl Drop for AbortGuard<'_> {
    fn drop(&mut self) {
        if self.1 {
            self.0.abort();
        }
    }
}

impl PartTally {
    /// Tallies of the report range `(start, end]` (rows may reach back one period before
    /// `start`: the previous period), with the report's time zone and prices.
    pub fn new(range: (i64, i64), tz: Tz, prices: Prices) -> PartTally {
        let len = (range.1 - range.0).max(0);
        PartTally {
            range,
            tz,
            hours: len as f64 / HOUR_MS,
            prices,
            state: std::sync::Mutex::new(FoldState {
                tally: Tally::new(range),
                next: 0,
                pending: BTreeMap::new(),
                out_of_order: false,
                aborted: false,
            }),
            turn: std::sync::Condvar::new(),
            energy_spent: AtomicU64::new(0),
        }
    }

    /// Time the energy split took so far, summed over the workers (part of [`add`]'s time).
    ///
    /// [`add`]: PartTally::add
    pub fn energy_spent(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.energy_spent.load(Ordering::Relaxed))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FoldState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A guard that aborts the tally unless disarmed: a caller that must add partition `i` holds
    /// one from before its own work on `i` that can fail.
    pub fn guard(&self) -> AbortGuard<'_> {
        AbortGuard(self, true)
    }

    /// Stops the tally: workers waiting to add stop waiting, and [`finish`](PartTally::finish)
    /// is not to be called (the error that caused it is the caller's).
    pub fn abort(&self) {
        self.lock().aborted = true;
        self.turn.notify_all();
    }

    /// Reads and reduces partition `i` (partitions are numbered from 0 in report order, each
    /// added exactly once, from any thread) and folds every partition that is next in order.
    /// Waits while `i` is `AHEAD` or more partitions past the next one to fold. Returns the
    /// number of partitions folded so far. `shared`: the partition's string ids, interned once
    /// for every consumer of `frames` ([`crate::frames::shared`]); `cur`: its rows after the
    /// range's start, in memory where the caller has them (the energy split reads those instead
    /// of filtering `frames` again).
    pub fn add(
        &self,
        i: usize,
        frames: &Frames,
        shared: Option<&PartIds>,
        cur: Option<&Frames>,
    ) -> Result<usize, ReportError> {
        let guard = self.guard();
        {
            let st = self.lock();
            let st = self
                .turn
                .wait_while(st, |s| !s.aborted && !s.out_of_order && i >= s.next + AHEAD)
                .unwrap_or_else(|e| e.into_inner());
            if st.aborted || st.out_of_order {
                // Nothing more to fold (the union is read instead, or the run failed).
                let n = st.next;
                drop(st);
                guard.disarm();
                return Ok(n);
            }
        }
        let p = prepare(
            frames,
            self.range,
            &self.tz,
            self.hours,
            &self.prices,
            (shared, cur),
            &self.energy_spent,
        )?;
        let mut st = self.lock();
        st.pending.insert(i, p);
        loop {
            let next = st.next;
            let Some(p) = st.pending.remove(&next) else {
                break;
            };
            if !st.out_of_order && st.tally.fold(p).is_err() {
                st.out_of_order = true;
                st.pending.clear();
            }
            st.next += 1;
        }
        let n = st.next;
        drop(st);
        self.turn.notify_all();
        guard.disarm();
        Ok(n)
    }

    /// The report over the partitions added (`parts`: the same partitions, in the same order,
    /// for the second pass of an exact quantile and for the union when they were out of order).
    pub fn finish(self, parts: &[&Frames], input: &ReportInput) -> Result<Report, ReportError> {
        let st = self.state.into_inner().unwrap_or_else(|e| e.into_inner());
        if st.aborted {
            return Err(ReportError::Worker);
        }
        if st.out_of_order || st.next != parts.len() {
            // Not in report order: the union, as one partition.
            let union = Frames::union(parts.iter().map(|f| (*f).clone()))?;
            return build_parts(&[&union], input);
        }
        finish(st.tally, parts, input)
    }
}

/// Builds the report over the partitions' rows with `ts` in `input.range` = `(start, end]`
/// (the frames may reach back before `start`: the period of the same length before it is
/// reported when it has rows), reading one partition at a time. See the module documentation.
pub fn build_parts(parts: &[&Frames], input: &ReportInput) -> Result<Report, ReportError> {
    build_parts_with(parts, input, &|_| {})
}

/// [`build_parts`], calling `on_done(n)` after the `n`-th partition (progress on a terminal).
pub fn build_parts_with(
    parts: &[&Frames],
    input: &ReportInput,
    on_done: &(dyn Fn(usize) + Sync),
) -> Result<Report, ReportError> {
    let tally = PartTally::new(input.range, input.tz, input.prices.clone());
    // Partitions are read and reduced on a few threads (each its own rows) and folded in order:
    // memory holds the partitions in flight and those prepared ahead.
    let workers = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 4)
        .min(parts.len().max(1));
    let queue = std::sync::Mutex::new(parts.iter().enumerate());
    let results: Vec<Result<(), ReportError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                scope.spawn(|| -> Result<(), ReportError> {
                    loop {
                        let next = queue.lock().unwrap_or_else(|e| e.into_inner()).next();
                        let Some((i, f)) = next else { return Ok(()) };
                        on_done(tally.add(i, f, None, None)?);
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or(Err(ReportError::Worker)))
            .collect()
    });
    for r in results {
        r?;
    }
    tally.finish(parts, input)
}

/// The report from the tallies of every partition, in order.
fn finish(mut t: Tally, parts: &[&Frames], input: &ReportInput) -> Result<Report, ReportError> {
    let (start, end) = input.range;
    let len = (end - start).max(0);
    let hours = len as f64 / HOUR_MS;
    let prices = &input.prices;
    let signal = match (t.n_sm, t.n_busy) {
        (0, 0) => "none",
        (_, 0) => "sm_active",
        (0, _) => "busy",
        _ => "sm_active, else busy",
    };
    // Quantiles of the groups that span partitions; a second pass reads the values of a
    // bucket that straddles a rounding boundary.
    let mut fleet_p95 = t.fleet.p95();
    let mut previous_p95 = t.previous.p95();
    let mut model_p95: BTreeMap<String, Result<Option<f64>, (usize, u64)>> = t
        .by_model
        .iter_mut()
        .map(|(k, acc)| (k.clone(), acc.p95()))
        .collect();
    let pending = |r: &Result<Option<f64>, (usize, u64)>| r.as_ref().err().map(|e| e.0);
    if fleet_p95.is_err() || previous_p95.is_err() || model_p95.values().any(|r| r.is_err()) {
        let (fk, pk) = (pending(&fleet_p95), pending(&previous_p95));
        let mk: BTreeMap<&str, usize> = model_p95
            .iter()
            .filter_map(|(m, r)| pending(r).map(|k| (m.as_str(), k)))
            .collect();
        let (mut fv, mut pv) = (Vec::new(), Vec::new());
        let mut mv: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        for frames in parts {
            let (gpus, rows) = gpu_rows(frames, start - len + 1, end, None)?;
            for r in &rows {
                let Some(a) = r.activity() else { continue };
                let k = bucket_of(a);
                if r.ts <= start {
                    if k.is_some() && k == pk {
                        pv.push(a);
                    }
                    continue;
                }
                if k.is_some() && k == fk {
                    fv.push(a);
                }
                let model = gpus[r.gpu].model.as_str();
                if let Some(&mk) = mk.get(model)
                    && k == Some(mk)
                {
                    mv.entry(model.to_string()).or_default().push(a);
                }
            }
        }
        let pick = |r: &mut Result<Option<f64>, (usize, u64)>, mut v: Vec<f64>| {
            if let Err((_, rank)) = *r {
                v.sort_by(|a, b| a.total_cmp(b));
                *r = Ok(v.get(rank as usize).copied().map(r3));
            }
        };
        pick(&mut fleet_p95, fv);
        pick(&mut previous_p95, pv);
        for (m, r) in model_p95.iter_mut() {
            let v = mv.remove(m.as_str()).unwrap_or_default();
            pick(r, v);
        }
    }
    let fleet = t.fleet.finish(fleet_p95.unwrap_or(None), hours, prices);
    let previous_period = t.has_previous.then(|| {
        t.previous
            .finish(previous_p95.unwrap_or(None), hours, prices)
    });
    let by_model = t
        .by_model
        .into_iter()
        .map(|(k, acc)| {
            let p95 = model_p95.remove(&k).and_then(|r| r.ok()).flatten();
            acc.finish(p95, hours, prices)
        })
        .collect();
    let power = t.energy.idle_power();
    let idle = idle_models(input.analysis, prices, &power);
    let (allocation, allocated_unused) = allocated(input.analysis, prices, &power);
    let mut teams = t
        .teams
        .finish(&idle, &allocated_unused, allocation.is_some(), prices);
    t.energy.apply(&mut teams, prices);
    teams.nobody = no_team(&teams, &fleet, prices);
    let offpeak_windows = offpeak(input.analysis);
    let offpeak_baseline = offpeak_baseline(input.analysis);
    // Charts.
    let hour_of_week = t
        .hour_of_week
        .iter()
        .map(|day| {
            day.iter()
                .map(|&(s, w)| (w > 0.0).then(|| r3(s / w)))
                .collect()
        })
        .collect();
    let slots = window_slots(&offpeak_windows);
    let first_hour = start.div_euclid(3_600_000);
    let free_timeline = t
        .timeline
        .iter()
        .enumerate()
        .map(|(i, &(g, f))| {
            let start = (first_hour + i as i64) * 3_600_000;
            let level =
                slot_of(start, &input.tz).and_then(|(d, h)| slots.get(&(d * 24 + h)).copied());
            FreeHour {
                hour: fmt_ms(start),
                gpus: g,
                free_gpus: f,
                offpeak: level.is_some(),
                offpeak_free_gpus: level,
            }
        })
        .collect();
    let charts = Charts {
        hour_of_week,
        gpu_activity: t.gpu_activity,
        free_timeline,
    };
    let mut data_quality = data_quality(&t.sources, t.gpu_notes, t.gaps, input, signal, &teams);
    data_quality.extend(t.energy.notes());
    Ok(Report {
        version: REPORT_VERSION,
        from: fmt_ms(start),
        until: fmt_ms(end),
        hours: r3(hours),
        tz: input.tz.name().to_string(),
        sources: input.sources.clone(),
        prices: prices.clone(),
        activity_signal: signal.into(),
        fleet,
        previous_period,
        by_node: t.by_node,
        by_model,
        teams,
        idle_models: idle.into_iter().take(input.top).collect(),
        allocation,
        allocated_unused: allocated_unused.into_iter().take(input.top).collect(),
        consolidation: consolidation(input.analysis, prices),
        offpeak_windows,
        offpeak_baseline,
        mig: None,
        changes: None,
        next_steps: Vec::new(),
        actions: Vec::new(),
        data_quality,
        charts,
        out_of_sample: None,
        trend: None,
        work: None,
        plans: Vec::new(),
        range_flags: Vec::new(),
    })
}

/// The row of what no team used (`Teams::nobody`): the fleet's GPU-hours available less the
/// teams', priced, and the energy charged to no team; `None` without team rows.
fn no_team(teams: &Teams, fleet: &Usage, prices: &Prices) -> Option<TeamUsage> {
    if teams.rows.is_empty() {
        return None;
    }
    let used: f64 = teams.rows.iter().map(|t| t.gpu_hours).sum();
    let gpu_hours = r3((fleet.gpu_hours_available - used).max(0.0));
    let energy_kwh = teams.energy.as_ref().map(|e| e.idle_kwh);
    Some(TeamUsage {
        team: "(no team)".into(),
        gpu_hours,
        cost: r2(gpu_hours * prices.gpu_hour),
        energy_kwh,
        cost_energy: energy_kwh.map(|k| r2(k * prices.kwh)),
        ..TeamUsage::default()
    })
}
