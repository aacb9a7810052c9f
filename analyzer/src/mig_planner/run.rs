//! `tessera mig plan`'s workflow over frames already read ([`run`]): the demand of every
//! workload, the packing, the `day` config of the plan file, the GPUs free per hour and the
//! off-peak profile, and the `night` config with its schedule when a switch is proposed. The
//! result ([`PlanOutcome`]) holds everything the command writes and prints; [`super::summary`]
//! renders it.
//!
//! What it does not do: read sources, write files or print (the command does), or change any
//! GPU (`tessera mig apply` does).

use std::collections::BTreeSet;

use chrono_tz::Tz;
use tessera_core::mig::plan::TesseraPlan;
use tessera_core::mig::plan_sections::{PlanSchedule, PlanWindow};

use super::demand::{self, Demand, DemandError, DemandParams};
use super::schedule::{self, NightProposal, NoNightLayout};
use super::{PlannerError, PlannerOptions, Proposal, export};
use crate::advisor::offpeak::OffpeakParams;
use crate::advisor::{self, AdvisorError};
use crate::frames::Frames;
use crate::range::TimeRange;

/// What `tessera mig plan` is asked for, besides the frames.
pub struct PlanRequest {
    pub demand: DemandParams,
    pub offpeak: OffpeakParams,
    /// Time zone of the off-peak windows and the schedule.
    pub tz: Tz,
    /// The sources as the user named them (the plan file's comment).
    pub sources: Vec<String>,
    /// How the schedule names the plan file (relative to the schedule's folder, or absolute).
    pub plan_ref: String,
    /// The range the frames hold (the plan file's `window`).
    pub range: Option<crate::range::TimeRange>,
}

/// What the workflow reports while it runs.
pub enum Progress<'a> {
    /// `n` partitions are done in this phase (`measuring demand`, `finding free hours`).
    Phase(&'static str, usize),
    /// The demand's remarks on the data (stderr notes).
    Note(&'a str),
    /// Reading is over.
    Done,
}

/// Why no plan could be made.
#[derive(Debug, thiserror::Error)]
pub enum PlanRunError {
    #[error(transparent)]
    Demand(#[from] DemandError),
    /// Finding the free hours (the advisor's off-peak reading) failed.
    #[error(transparent)]
    FreeHours(#[from] AdvisorError),
    #[error(transparent)]
    Planner(#[from] PlannerError),
    #[error(
        "the sources show no GPU of a MIG-capable model tessera knows ({gpus} GPU(s) seen): nothing to plan"
    )]
    NoMigGpu { gpus: usize },
    #[error("internal error: the planner produced an invalid plan")]
    Invalid(#[source] tessera_core::mig::plan::TesseraPlanError),
}

/// Everything `tessera mig plan` writes and prints.
pub struct PlanOutcome {
    pub demand: Demand,
    pub plan: Proposal,
    /// GPUs before and after the plan, and freed ([`super::GpuCount`]: the one definition).
    pub count: super::GpuCount,
    /// The plan file: `day`, and `night` when a switch is proposed.
    pub file: TesseraPlan,
    /// The night layout and its schedule, or why there is none.
    pub night: Result<NightProposal, NoNightLayout>,
}

/// Plans MIG layouts over `parts` (one per node partition, read one at a time).
pub fn run(
    parts: &[&Frames],
    req: &PlanRequest,
    progress: &(dyn Fn(Progress<'_>) + Sync),
) -> Result<PlanOutcome, PlanRunError> {
    let d = demand::extract_parts_with(parts, &req.demand, &|n| {
        progress(Progress::Phase("measuring demand", n))
    })?;
    for n in &d.notes {
        progress(Progress::Note(n));
    }
    let plan = super::plan(&d.workloads, &d.fleet, &PlannerOptions::default())?;
    let count = plan.gpu_count(&d.workloads);

    let mut file = day_file(&d, &plan, req.range, &req.sources)?;
    let day = file.configs["day"].clone();

    // The night layout, where the off-peak profile has windows.
    let params = advisor::Params {
        tz: req.tz,
        offpeak: req.offpeak.clone(),
        ..advisor::Params::default()
    };
    let mut free = advisor::offpeak::FreeGpus::default();
    for (i, f) in parts.iter().enumerate() {
        progress(Progress::Phase("finding free hours", i));
        free.merge(advisor::offpeak::free_gpus_per_hour(f, &params.offpeak)?);
    }
    progress(Progress::Done);
    let profile = advisor::offpeak::profile(&free, &params);
    let observed: BTreeSet<i64> = free.per_hour.keys().copied().collect();
    let night = schedule::propose(
        &day,
        &d.workloads,
        &d.measured,
        &d.fleet,
        &observed,
        &profile,
        req.tz,
        req.offpeak.min_share,
        &req.plan_ref,
    );
    if let Ok(p) = &night {
        file.configs.insert("night".into(), p.night.clone());
        file.schedule = Some(PlanSchedule {
            timezone: p.schedule.timezone.clone(),
            switches: p.schedule.switches.clone(),
        });
    }
    file.validate("the planned layouts")
        .map_err(PlanRunError::Invalid)?;
    Ok(PlanOutcome {
        demand: d,
        plan,
        count,
        file,
        night,
    })
}

/// A schedule's cron lines and systemd service and timer.
pub struct Units {
    pub cron: String,
    pub service: String,
    pub timer: String,
}

impl PlanOutcome {
    /// The cron lines and systemd units that run `cmd` (the scheduled apply) at the schedule's
    /// switches; `None` without a night layout.
    pub fn units(&self, cmd: &schedule::ApplyCommand) -> Option<Units> {
        let p = self.night.as_ref().ok()?;
        let (service, timer) = schedule::systemd_units(&p.schedule, cmd);
        Some(Units {
            cron: schedule::cron_lines(&p.schedule, cmd),
            service,
            timer,
        })
    }
}

/// The plan file of `plan` over demand `d`: its `day` config, the window it was measured over
/// and where each workload's rows are (what `tessera replay` moves); `NoMigGpu` when no GPU of
/// the plan is MIG-capable. The night layout is [`run`]'s.
pub fn day_file(
    d: &Demand,
    plan: &Proposal,
    range: Option<TimeRange>,
    sources: &[String],
) -> Result<TesseraPlan, PlanRunError> {
    let mut file = TesseraPlan::new();
    file.comment = Some(format!(
        "tessera mig plan {}: {} workload(s), {} GPU(s) used (lower bound {}), sources {}",
        env!("CARGO_PKG_VERSION"),
        d.workloads.len(),
        plan.gpus_used,
        plan.lower_bound,
        sources.join(", ")
    ));
    let day = export::config(plan, &d.workloads);
    if day.is_empty() {
        return Err(PlanRunError::NoMigGpu {
            gpus: d.fleet.len(),
        });
    }
    file.configs.insert("day".into(), day);
    file.window = range.map(|r| PlanWindow {
        from: crate::times::fmt_ms(r.since),
        until: crate::times::fmt_ms(r.until),
        sources: sources.to_vec(),
    });
    // Where each workload's rows are: what `tessera replay` moves.
    file.workloads = d
        .workloads
        .iter()
        .zip(&d.measured)
        .filter_map(|(w, m)| {
            let mut s = m.source.clone()?;
            s.activity = s.activity.map(|a| (a * 1e4).round() / 1e4);
            Some((w.id.clone(), s))
        })
        .collect();
    Ok(file)
}
