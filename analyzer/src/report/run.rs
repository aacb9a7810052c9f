//! The weekly report's workflow over frames already read: one pass per node partition
//! ([`super::pass`]: the advisor, the tallies and the MIG demand), the tallies finished into the
//! [`Report`], the MIG planner's recommendation over the same range set on it, and the plan
//! actions' verdicts from replaying their plans ([`Replays`]).
//!
//! What it does not do: read sources or resolve the range (the command does, through
//! `tessera::range`), or print (the renderers do). The MIG planner's failure is not an error of
//! the report: its section says why instead.

use chrono_tz::Tz;

use super::{MigSection, Prices, Report, ReportError, ReportInput, mig_section, pass, trend};
use crate::advisor::Params;
use crate::changes::{self, ChangeRequest};
use crate::frames::Frames;
use crate::ingest::IngestReport;
use crate::mig_planner::{self, PlannerOptions, demand::DemandParams};
use crate::range::TimeRange;
use crate::timing::Stopwatch;

/// What the report is asked for, besides the frames.
pub struct ReportRequest<'a> {
    /// The reported range; the frames may reach one range further back (week over week).
    pub range: TimeRange,
    /// What ingest said (data-quality notes).
    pub ingest: &'a IngestReport,
    /// The sources as the user named them.
    pub sources: Vec<String>,
    pub prices: Prices,
    /// Time zone of the hour-of-week heatmap and the off-peak windows.
    pub tz: Tz,
    /// How many idle-loaded models (and planned GPUs) to list.
    pub top: usize,
    /// `--change-at`: the layout change to compare around, instead of the ones found.
    pub change_at: Option<i64>,
    /// `tessera mig apply` runs from the journals beside the history (evidence of changes).
    pub journal: Vec<changes::journal::JournalRun>,
    /// `--plan FILE`: the plan that made a change, whose prediction the report sets beside the
    /// change's measured saving.
    pub plan: Option<changes::predicted::PlanPrediction>,
    /// `--trend.weeks`: the weeks the trend shows (0: no trend; [`super::trend`]).
    pub trend_weeks: usize,
    /// The end of the data's first row read, unix ms (the trend skips weeks before it).
    pub first_ts: Option<i64>,
    /// The user's `--since`/`--until` flags as given, for the commands the report prints that
    /// plan and replay (`crate::commands`).
    pub range_flags: Vec<String>,
    /// The teams' contacts (`--owners`, namespace labels) and what their sources said.
    pub owners: crate::owners::Owners,
    /// The work the serving frameworks counted in the range and the trend's weeks before it
    /// (`prometheus:` sources; empty: none), for the Work per GPU-hour section, the changes and
    /// the trend.
    pub work: Vec<crate::work::WorkRow>,
    /// The user's own work counters the rows include (`--work-metrics`), named in the section.
    pub work_metrics: Vec<crate::work::WorkMetric>,
    /// How the plan actions get their verdicts ([`Replays`]).
    pub replays: Replays,
}

/// How the report replays the plans of its plan actions (`tessera replay`'s model) so that each
/// action carries a verdict (safe, tight, unsafe).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replays {
    /// `--no-replay`: the actions keep no verdict.
    None,
    /// The default: the plans the report made, replayed on the reported period.
    InSample,
    /// `--out-of-sample`: plans of each kind made from the previous period and replayed on the
    /// reported one; their figures are the report's `out_of_sample` section.
    OutOfSample,
}

/// Builds the report over `parts` (one per node partition). `progress(phase, n)`: `n`
/// partitions are done in `phase` (`analysing`, then `building report`).
pub fn run(
    parts: &[&Frames],
    req: ReportRequest,
    progress: &(dyn Fn(&'static str, usize) + Sync),
) -> Result<Report, ReportError> {
    let (start, end) = (req.range.since, req.range.until);
    let change = ChangeRequest {
        range: req.range,
        at: req.change_at,
        journal: req.journal.clone(),
        plan: req.plan.clone(),
        gpu_hour: req.prices.gpu_hour,
        kwh: req.prices.kwh,
        currency: req.prices.currency.clone(),
    };
    // A bad --change-at fails before the long pass.
    change.check()?;
    let params = Params {
        tz: req.tz,
        ..Params::default()
    };
    let watch = Stopwatch::start("report");
    let pass = pass::run(
        parts,
        (start, end),
        &params,
        req.prices.clone(),
        req.sources.clone(),
        &DemandParams::default(),
        &|n| progress("analysing", n),
    )?;
    watch.lap("pass");
    progress("building report", parts.len());
    let watch = Stopwatch::start("report");
    let mut report = pass.tally.finish(
        parts,
        &ReportInput {
            analysis: &pass.analysis,
            range: (start, end),
            ingest: req.ingest,
            sources: req.sources.clone(),
            prices: req.prices.clone(),
            tz: req.tz,
            top: req.top,
        },
    )?;
    watch.lap("finish");
    actions_and_mig(&mut report, &pass.analysis, &pass.demand, &req);
    let watch = Stopwatch::start("report");
    report.changes = Some(changes::run(pass.scans, &change)?);
    watch.lap("changes");
    progress("trend", parts.len());
    late_sections(parts, &mut report, &req, &params)?;
    work_of_actions(&mut report, &pass.analysis.findings);
    replay_plans(parts, &mut report, &req, progress);
    Ok(report)
}

/// The plan actions' verdicts ([`Replays`]): their plans replayed on the reported period
/// (`crate::replay::train`).
fn replay_plans(
    parts: &[&Frames],
    report: &mut Report,
    req: &ReportRequest,
    progress: &(dyn Fn(&'static str, usize) + Sync),
) {
    use crate::replay::train::{self, PlanKind};
    let checks = match req.replays {
        Replays::None => return,
        Replays::InSample if report.plans.is_empty() => return,
        Replays::InSample => {
            progress("replaying the plans", 0);
            let watch = Stopwatch::start("report");
            let checks =
                train::in_sample(parts, req.range, &report.plans, &req.sources, &req.prices);
            watch.lap("replays");
            checks
        }
        Replays::OutOfSample => {
            progress("replaying the plans", 0);
            let kinds = [PlanKind::Consolidation, PlanKind::Mig];
            let checks = train::out_of_sample(
                parts,
                req.range.previous(),
                req.range,
                &kinds,
                req.tz,
                &req.sources,
                &req.prices,
            );
            report.out_of_sample = Some(checks.clone());
            checks
        }
    };
    super::verdicts_from_replays(&mut report.actions, &checks);
}

/// The report's MIG plan and its actions: the findings and the MIG layouts priced, one
/// recommendation per workload; the MIG section; owners, next steps and the plans to replay.
fn actions_and_mig(
    report: &mut Report,
    analysis: &crate::advisor::Analysis,
    d: &crate::mig_planner::demand::Demand,
    req: &ReportRequest,
) {
    let watch = Stopwatch::start("report");
    let planned = mig_planner::plan(&d.workloads, &d.fleet, &PlannerOptions::default());
    watch.lap("MIG plan");
    let watch = Stopwatch::start("report");
    // One recommendation per workload: the findings and the MIG layouts, priced.
    let mig = match &planned {
        Ok(plan) if !plan.gpus.is_empty() => Some(crate::actions::mig_candidate(d, plan)),
        _ => None,
    };
    report.range_flags = req.range_flags.clone();
    report.actions = crate::actions::recommend(
        &analysis.findings,
        mig.as_ref(),
        &crate::actions::ActionContext {
            sources: &report.sources,
            period_hours: report.hours,
            prices: Some(&report.prices),
            range: &req.range_flags,
        },
    );
    // The MIG section weighs the MIG layouts against the consolidation the actions would keep
    // without them (the analysis' actions: the same precedence, no MIG candidate).
    let consolidation_freed = analysis
        .actions
        .iter()
        .find(|a| a.kind == "consolidate")
        .and_then(|a| a.gpus_freed)
        .map_or(0, |n| n.max(0) as u64);
    report.mig = Some(match &planned {
        Ok(plan) if !plan.gpus.is_empty() => mig_section(
            d,
            plan,
            req.top,
            consolidation_freed,
            (&report.sources, &report.range_flags),
        ),
        Ok(_) => MigSection::note(
            "MIG recommendation: no workload to place on a MIG-capable GPU in this range.".into(),
        ),
        Err(e) => MigSection::note(format!("MIG recommendation: not available ({e}).")),
    });
    set_owners(report, analysis, &req.owners);
    report.next_steps = next_steps_of(report, analysis);
    report.plans = action_plans(analysis, d, planned.as_ref().ok(), report, req.range);
    watch.lap("actions");
}

/// The sections that read the frames again after the pass: work per GPU-hour (first: the
/// trend leaves the changes it flags out of the realized savings) and the trend.
fn late_sections(
    parts: &[&Frames],
    report: &mut Report,
    req: &ReportRequest,
    params: &Params,
) -> Result<(), ReportError> {
    let watch = Stopwatch::start("report");
    let work = work_input(parts, req)?;
    work_of(report, req, work.as_ref());
    watch.lap("work");
    let watch = Stopwatch::start("report");
    report.trend = trend_of(parts, report, req, params, work.as_ref())?;
    watch.lap("trend");
    Ok(())
}

/// The GPU-hours each pod held per hour over all of `parts` (the trend's weeks too), when the
/// sources counted work.
fn work_input(
    parts: &[&Frames],
    req: &ReportRequest,
) -> Result<Option<trend::WorkInput>, ReportError> {
    if req.work.is_empty() {
        return Ok(None);
    }
    let mut held = crate::work::Held::new();
    for p in parts {
        for (k, v) in crate::work::held_hours(p)? {
            crate::work::add(&mut held, k, v);
        }
    }
    let ctx = crate::work::WorkContext {
        gpu_hour_price: req.prices.gpu_hour,
        kwh_price: req.prices.kwh,
        tz: req.tz,
    };
    Ok(Some(trend::WorkInput {
        held,
        rows: req.work.clone(),
        ctx,
    }))
}

/// Work per GPU-hour over the range's hours (`crate::work`), when the sources counted work,
/// and before and after each compared change.
fn work_of(report: &mut Report, req: &ReportRequest, work: Option<&trend::WorkInput>) {
    let Some(w) = work else { return };
    if let Some(s) = report.changes.as_mut() {
        changes::add_work(s, &w.held, &w.rows, &w.ctx);
    }
    let within = |end: i64| end > req.range.since && end <= req.range.until;
    let mut held = w.held.clone();
    held.retain(|k, _| within(k.2));
    let rows: Vec<crate::work::WorkRow> = w
        .rows
        .iter()
        .filter(|r| within(r.hour_end_ms))
        .cloned()
        .collect();
    report.work = crate::work::summarise(&held, &rows, &w.ctx).map(|mut s| {
        s.declared = req.work_metrics.clone();
        s
    });
}

/// Each action's pods' work per GPU-hour, and one sentence of it in the action's evidence
/// beside the team's (a pod that does less work per GPU-hour than its team is the better
/// candidate to act on).
fn work_of_actions(report: &mut Report, findings: &[crate::advisor::Finding]) {
    attach_work(report, findings);
    if let Some(w) = &report.work {
        prefer_low_work(&mut report.actions, &w.teams);
    }
}

/// Each action's pods' figures and the evidence sentence.
fn attach_work(report: &mut Report, findings: &[crate::advisor::Finding]) {
    let Some(w) = &report.work else { return };
    for a in &mut report.actions {
        let pods: std::collections::BTreeSet<(String, String)> = findings
            .iter()
            .filter(|f| a.findings.contains(&f.id))
            .filter_map(|f| Some((f.entity.namespace.clone()?, f.entity.pod.clone()?)))
            .collect();
        a.work = w
            .pods
            .iter()
            .filter(|p| pods.contains(&(p.namespace.clone(), p.pod.clone().unwrap_or_default())))
            .cloned()
            .collect();
        for p in &a.work {
            let team = w
                .teams
                .iter()
                .find(|t| t.namespace == p.namespace && t.unit == p.unit)
                .and_then(|t| t.per_gpu_hour);
            if let (Some(v), Some(pod)) = (p.per_gpu_hour, &p.pod) {
                if !a.evidence.ends_with('.') {
                    a.evidence.push('.');
                }
                a.evidence.push_str(&format!(
                    " Work: {}/{pod} did {v:.0} {} per GPU-hour{}.",
                    p.namespace,
                    p.unit,
                    team.map_or(String::new(), |t| format!(
                        " (team {}: {t:.0})",
                        p.namespace
                    ))
                ));
            }
        }
    }
}

/// An action whose pods do less than half their team's work per GPU-hour (of a unit) ranks
/// before the `scale_idle_spans` actions above it: a workload that does little work for its GPU
/// is a better candidate than one merely idle part of the time. The others keep their order;
/// ranks are numbered again.
fn prefer_low_work(actions: &mut Vec<crate::actions::Action>, teams: &[crate::work::WorkFigure]) {
    let low = |a: &crate::actions::Action| {
        a.work.iter().any(|p| {
            let team = teams
                .iter()
                .find(|t| t.namespace == p.namespace && t.unit == p.unit);
            matches!(
                (p.per_gpu_hour, team.and_then(|t| t.per_gpu_hour)),
                (Some(v), Some(t)) if v < 0.5 * t
            )
        })
    };
    let mut i = 0;
    while i < actions.len() {
        let first_idle = actions[..i]
            .iter()
            .position(|a| a.kind == "scale_idle_spans");
        match first_idle {
            Some(j) if actions[i].kind != "scale_idle_spans" && low(&actions[i]) => {
                let mut a = actions.remove(i);
                a.evidence.push_str(
                    " Ranked before the idle-span actions: it does less than half its team's work per GPU-hour.",
                );
                actions.insert(j, a);
            }
            _ => {}
        }
        i += 1;
    }
    for (n, a) in actions.iter_mut().enumerate() {
        a.rank = n + 1;
    }
}

/// The owners of the team rows and the actions, and the owners' notes among the data-quality
/// notes.
fn set_owners(
    report: &mut Report,
    analysis: &crate::advisor::Analysis,
    owners: &crate::owners::Owners,
) {
    for row in &mut report.teams.rows {
        row.owner = owners.get(&row.team).map(str::to_string);
    }
    crate::actions::set_owners(&mut report.actions, &analysis.findings, owners);
    for n in &owners.notes {
        report.data_quality.push(super::QualityNote {
            kind: "owners".into(),
            message: n.clone(),
        });
    }
}

/// The report's trend ([`trend::run`]) with the request's weeks and journal.
fn trend_of(
    parts: &[&Frames],
    report: &Report,
    req: &ReportRequest,
    params: &Params,
    work: Option<&trend::WorkInput>,
) -> Result<Option<super::Trend>, ReportError> {
    trend::run(
        parts,
        report,
        req.range,
        &trend::TrendRequest {
            weeks: req.trend_weeks,
            params,
            prices: &req.prices,
            sources: &req.sources,
            journal: &req.journal,
            first_ts: req.first_ts,
            work,
        },
    )
}

/// The report's next steps; no consolidation step where every move's workload is answered first
/// by another action (the plan file would hold no move).
fn next_steps_of(report: &Report, analysis: &crate::advisor::Analysis) -> Vec<super::NextStep> {
    let mut steps = super::next_steps(report);
    if !analysis.actions.iter().any(|a| a.kind == "consolidate") {
        steps.retain(|s| !s.command.contains(super::CONSOLIDATION_PLAN_FILE));
    }
    steps
}

/// The plans of the report's plan actions, as files to replay: the consolidation moves the
/// actions keep (`advisor::plan_out`, as `analyze --plan-out` writes them) and the MIG day
/// layout (as `mig plan` writes it), each only when an action proposes it.
fn action_plans(
    analysis: &crate::advisor::Analysis,
    demand: &crate::mig_planner::demand::Demand,
    mig: Option<&crate::mig_planner::Proposal>,
    report: &Report,
    range: crate::range::TimeRange,
) -> Vec<(&'static str, tessera_core::mig::plan::TesseraPlan)> {
    let proposes = |kind: &str| report.actions.iter().any(|a| a.kind == kind);
    let mut out = Vec::new();
    if proposes("consolidate")
        && let Ok(p) = crate::advisor::plan_out::consolidation_plan(analysis)
    {
        out.push(("consolidation", p));
    }
    if proposes("mig_layout")
        && let Some(plan) = mig
        && let Ok(p) = mig_planner::day_file(demand, plan, Some(range), &report.sources)
    {
        out.push(("mig", p));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actions::Action;
    use crate::work::WorkFigure;

    fn action(kind: &'static str, pod: Option<f64>) -> Action {
        Action {
            rank: 0,
            kind,
            what: kind.into(),
            workloads: Vec::new(),
            gpus_freed: None,
            gpu_hours_per_month: 730.0,
            saving_per_month: None,
            currency: None,
            evidence: String::new(),
            verdict: String::new(),
            steps: Vec::new(),
            advice: None,
            done_by: String::new(),
            owner: None,
            teams: Vec::new(),
            findings: Vec::new(),
            overruled: Vec::new(),
            work: pod.map(|v| figure(Some("p"), v)).into_iter().collect(),
        }
    }

    fn figure(pod: Option<&str>, v: f64) -> WorkFigure {
        WorkFigure {
            namespace: "chat".into(),
            pod: pod.map(str::to_string),
            workload: pod.map(str::to_string),
            model: None,
            unit: "tokens".into(),
            work: v,
            gpu_hours: 1.0,
            per_gpu_hour: Some(v),
            kwh: None,
            per_kwh: None,
            cost: 2.0,
            per_cost: None,
            hours: 1,
            hour_of_week: None,
        }
    }

    #[test]
    fn a_workload_doing_little_work_ranks_before_one_merely_idle_part_time() {
        let teams = [figure(None, 36_000.0)];
        let mut actions = vec![
            action("release", None),
            action("scale_idle_spans", None),
            action("scale_to_zero", Some(30_000.0)),
            action("consolidate", Some(1_000.0)),
        ];
        prefer_low_work(&mut actions, &teams);
        let order: Vec<(&str, usize)> = actions.iter().map(|a| (a.kind, a.rank)).collect();
        assert_eq!(
            order,
            [
                ("release", 1),
                ("consolidate", 2),
                ("scale_idle_spans", 3),
                ("scale_to_zero", 4)
            ]
        );
        assert!(actions[1].evidence.contains("less than half its team's"));
        assert!(
            !actions[3].evidence.contains("less than half"),
            "30,000 of 36,000 is not low"
        );
    }
}
