//! The report's energy per team: each partition's GPU intervals split between the teams' processes
//! and idle ([`crate::energy`]), folded in partition order (the sums are those of one pass over
//! the union, byte for byte), and each GPU's idle power, which prices the energy of the findings'
//! wasted GPU-hours. The intervals are made from the tallies' own GPU rows, in the report's GPU
//! order (node, index, model), in the same walk as the idle power ([`gpu_walk`]): the GPU table
//! is not read a second time.
//!
//! Reads the frames and rows it is given; does not split anything itself (the energy module
//! does) and does not render.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::rows::{Gpu, Row};
use super::{
    EnergySplit, IdlePower, Prices, QualityNote, ReportError, TeamUsage, Teams, r2, r3, team_of,
};
use crate::energy::{Contributions, GpuIntervals, Held, IntervalsBuilder, contributions_of};
use crate::frames::Frames;

/// A row is idle for the idle power at this activity or below (the idle-loaded detector's).
const IDLE_ACTIVITY: f64 = 0.01;
const J_PER_KWH: f64 = 3.6e6;

/// One partition's split, keyed by team name.
pub(super) type TeamEnergy = Contributions<Arc<str>>;

/// One partition's GPU intervals (`intervals`, from [`gpu_walk`]) split by team (a process's
/// namespace, else its Slurm job, else `(unattributed)`, as the team table names it), its MIG
/// and process rows read from `frames` in `(range.0, range.1]`; `held`: whether `frames` are in
/// memory ([`Held`]).
pub(super) fn team_energy(
    frames: &Frames,
    range: (i64, i64),
    held: Held,
    intervals: GpuIntervals,
) -> Result<TeamEnergy, ReportError> {
    // The last (namespace, job) and its team: rows cycle through a node's few processes.
    let mut last: Option<(Option<String>, Option<String>, Arc<str>)> = None;
    Ok(contributions_of(frames, range, held, intervals, |p| {
        if let Some((ns, job, team)) = &last
            && ns.as_deref() == p.namespace
            && job.as_deref() == p.slurm_job
        {
            return Some(team.clone());
        }
        let team: Arc<str> = team_of(p.namespace, p.slurm_job)
            .unwrap_or_else(|| "(unattributed)".into())
            .into();
        last = Some((
            p.namespace.map(str::to_string),
            p.slurm_job.map(str::to_string),
            team.clone(),
        ));
        Some(team)
    })?)
}

/// One GPU's idle rows: node, index, model, Σ energy J and Σ seconds.
pub(super) type GpuIdle = (String, Option<i64>, String, f64, f64);

/// In one walk over each GPU's current rows (`per`, in the order of `gpus`): each GPU's energy
/// and time over its rows with activity ≤ 1% and known energy (0 s: none; the GPU's model is
/// still known), and the partition's GPU intervals for the energy split (in the report's GPU
/// order, each GPU's model its first row's).
pub(super) fn gpu_walk(gpus: &[Gpu], per: &[&[&Row]]) -> (Vec<GpuIdle>, GpuIntervals) {
    let mut b = IntervalsBuilder::with_capacity(per.iter().map(|r| r.len()).sum());
    let idle = gpus
        .iter()
        .zip(per)
        .map(|(g, rows)| {
            b.gpu(Some(&g.node), g.uuid.as_deref(), g.index, Some(&g.model));
            let (mut j, mut s) = (0.0, 0.0);
            for r in *rows {
                let (e, a) = (r.energy_j(), r.activity());
                b.row(r.ts, e, a);
                if let (Some(e), Some(a)) = (e, a)
                    && a <= IDLE_ACTIVITY
                    && r.interval > 0
                {
                    j += e;
                    s += r.interval as f64 / 1000.0;
                }
            }
            (g.node.clone(), g.index, g.model.clone(), j, s)
        })
        .collect();
    (idle, b.finish())
}

/// The split and the idle power summed over the partitions so far.
#[derive(Default)]
pub(super) struct EnergyAcc {
    /// Σ the intervals' energy; `None` until an interval with energy is met.
    gpu_j: Option<f64>,
    workloads_j: f64,
    idle_j: f64,
    no_activity_j: f64,
    unmatched: u64,
    /// Team → its slot in `team_j`.
    index: BTreeMap<Arc<str>, usize>,
    /// Per team, Σ its shares; `None` until it gets one (its energy is unknown till then).
    team_j: Vec<Option<f64>>,
    idle_by_gpu: BTreeMap<(String, u32), (f64, f64)>,
    model_of: BTreeMap<(String, u32), String>,
    idle_by_model: BTreeMap<String, (f64, f64)>,
}

impl EnergyAcc {
    /// Adds one partition's split and idle rows, in order.
    pub(super) fn fold(&mut self, e: TeamEnergy, idle: Vec<GpuIdle>) {
        let global: Vec<usize> = e
            .keys
            .iter()
            .map(|k| {
                let n = self.team_j.len();
                let g = *self.index.entry(k.clone()).or_insert(n);
                if g == n {
                    self.team_j.push(None);
                }
                g
            })
            .collect();
        for (k, j) in e.shares {
            *self.team_j[global[k]].get_or_insert(0.0) += j;
            self.workloads_j += j;
        }
        for (gpu_j, idle_j) in e.intervals {
            *self.gpu_j.get_or_insert(0.0) += gpu_j;
            self.idle_j += idle_j;
        }
        self.no_activity_j += e.no_activity_j;
        self.unmatched += e.unmatched;
        for (node, index, model, j, s) in idle {
            if s > 0.0 {
                let m = self.idle_by_model.entry(model.clone()).or_default();
                m.0 += j;
                m.1 += s;
            }
            if let Some(i) = index.and_then(|i| u32::try_from(i).ok()) {
                if s > 0.0 {
                    self.idle_by_gpu.insert((node.clone(), i), (j, s));
                }
                self.model_of.insert((node, i), model);
            }
        }
    }

    /// Each GPU's idle power (and its model's).
    pub(super) fn idle_power(&self) -> IdlePower {
        let w = |&(j, s): &(f64, f64)| j / s;
        IdlePower {
            by_gpu: self
                .idle_by_gpu
                .iter()
                .map(|(k, v)| (k.clone(), w(v)))
                .collect(),
            model_of: self.model_of.clone(),
            by_model: self
                .idle_by_model
                .iter()
                .map(|(k, v)| (k.clone(), w(v)))
                .collect(),
        }
    }

    /// The teams' energy and its price, and the split's totals; a team met only here (never in
    /// the team table) gets a row of its own, so the rows and idle add up to the GPUs' energy.
    pub(super) fn apply(&self, teams: &mut Teams, prices: &Prices) {
        let Some(gpu_j) = self.gpu_j else { return };
        for (team, &slot) in &self.index {
            let Some(j) = self.team_j[slot] else { continue };
            let kwh = r3(j / J_PER_KWH);
            let row = match teams.rows.iter_mut().position(|t| *t.team == **team) {
                Some(i) => &mut teams.rows[i],
                None => {
                    teams.rows.push(TeamUsage {
                        team: team.to_string(),
                        ..TeamUsage::default()
                    });
                    let n = teams.rows.len() - 1;
                    &mut teams.rows[n]
                }
            };
            row.energy_kwh = Some(kwh);
            row.cost_energy = Some(r2(kwh * prices.kwh));
        }
        let idle_kwh = r3(self.idle_j / J_PER_KWH);
        teams.energy = Some(EnergySplit {
            gpu_kwh: r3(gpu_j / J_PER_KWH),
            workloads_kwh: r3(self.workloads_j / J_PER_KWH),
            idle_kwh,
            idle_cost: r2(idle_kwh * prices.kwh),
            no_activity_kwh: r3(self.no_activity_j / J_PER_KWH),
        });
    }

    /// Data-quality notes of the split: energy left unsplit for lack of activity, process rows
    /// without a GPU row of known energy at their `ts`.
    pub(super) fn notes(&self) -> Vec<QualityNote> {
        let mut out = Vec::new();
        let kwh = r3(self.no_activity_j / J_PER_KWH);
        if kwh > 0.0 {
            out.push(QualityNote {
                kind: "energy".into(),
                message: format!(
                    "{kwh:.3} kWh of GPU energy not split between teams: processes ran but the \
                     data has no activity for them (counted idle)"
                ),
            });
        }
        if self.gpu_j.is_some() && self.unmatched > 0 {
            out.push(QualityNote {
                kind: "energy".into(),
                message: format!(
                    "{} process row(s) had no GPU row with energy at the same time: no energy \
                     given to them",
                    self.unmatched
                ),
            });
        }
        out
    }
}
