//! One recommendation per workload, with the MIG layouts weighed: the pure resolution is
//! [`crate::advisor::actions`] (re-exported here); this module measures the MIG layouts as its
//! candidate, for every output that recommends: the report
//! (whose pass measured the demand already: [`mig_candidate`]) and `analyze` / `notify`
//! ([`add_mig`]: measures the demand over the same partitions, plans, and recomputes the
//! analysis' actions with it), so that all three give a workload the same action.
//!
//! [`set_owners`] gives each action its owner (`crate::owners`). It also words the actions for
//! people: [`headline`], the block's [`lines`] (every text
//! format), an alert's [`alert_action`], `analyze`'s [`render_table`].
//!
//! It reads frames (the demand) and runs the MIG planner; it prints nothing and writes no file.

use std::collections::BTreeMap;

use crate::advisor::Analysis;
use crate::frames::Frames;
use crate::mig_planner::{self, PlannerOptions, demand};
use crate::owners::Owners;
use tessera_core::mig::plan::TesseraPlan;

pub use crate::advisor::actions::*;

/// The MIG plan as the actions' candidate: the GPUs it frees and the workloads it lays out (not
/// those it keeps where they are or cannot place), by the device they run on now.
pub fn mig_candidate(d: &demand::Demand, plan: &mig_planner::Proposal) -> MigCandidate {
    let count = plan.gpu_count(&d.workloads);
    let mut workloads = Vec::new();
    for g in plan.gpus.iter().filter(|g| !g.kept) {
        for i in &g.instances {
            for &w in &i.workloads {
                if let Some(w) = d.workloads.get(w) {
                    let key = match &w.current_gpu {
                        Some(u) => u.clone(),
                        None => w.node.clone().unwrap_or_else(|| w.id.clone()),
                    };
                    workloads.push((key, w.id.clone()));
                }
            }
        }
    }
    MigCandidate {
        gpus_freed: count.freed,
        workloads,
        evidence: format!(
            "MIG layouts run the planned workloads on {} GPU(s) (lower bound {}); the work needs {} GPU(s) after, {} before",
            plan.gpus_used, plan.lower_bound, count.after, count.before
        ),
    }
}

/// The MIG candidate of `parts` over `(since, until]`, when the planner places anything, with
/// the plan's day layout as a file (what `tessera mig plan` writes as `day`; `sources` name it);
/// a fleet without MIG-capable GPUs (or a planner error) has none.
pub fn plan_mig(
    parts: &[&Frames],
    range: (i64, i64),
    sources: &[String],
) -> Result<Option<(MigCandidate, Option<TesseraPlan>)>, demand::DemandError> {
    let cur: Vec<Frames> = parts.iter().map(|f| f.within(range.0, range.1)).collect();
    let refs: Vec<&Frames> = cur.iter().collect();
    let d = demand::extract_parts_with(&refs, &demand::DemandParams::default(), &|_| {})?;
    Ok(
        match mig_planner::plan(&d.workloads, &d.fleet, &PlannerOptions::default()) {
            Ok(plan) if !plan.gpus.is_empty() => {
                let window = crate::range::TimeRange {
                    since: range.0,
                    until: range.1,
                };
                let file = mig_planner::day_file(&d, &plan, Some(window), sources).ok();
                Some((mig_candidate(&d, &plan), file))
            }
            _ => None,
        },
    )
}

/// Recompute `analysis.actions` with the MIG layouts of `parts` as a candidate (unpriced, as
/// `analyze` and `notify` print them), and the user's range flags in their plan and replay
/// commands. Returns the plans the plan actions propose, as files (`consolidation`, `mig`), for
/// a replay of their verdicts.
pub fn add_mig(
    analysis: &mut Analysis,
    parts: &[&Frames],
    range: (i64, i64),
    range_flags: &[String],
) -> Result<Vec<(&'static str, TesseraPlan)>, demand::DemandError> {
    let mig = plan_mig(parts, range, &analysis.sources)?;
    if mig.is_some() || !range_flags.is_empty() {
        analysis.actions = recommend(
            &analysis.findings,
            mig.as_ref().map(|(c, _)| c),
            &ActionContext {
                sources: &analysis.sources,
                period_hours: (range.1 - range.0).max(0) as f64 / 3.6e6,
                prices: None,
                range: range_flags,
            },
        );
    }
    let proposes = |kind: &str| analysis.actions.iter().any(|a| a.kind == kind);
    let mut plans = Vec::new();
    if proposes("consolidate")
        && let Ok(p) = crate::advisor::plan_out::consolidation_plan(analysis)
    {
        plans.push(("consolidation", p));
    }
    if proposes("mig_layout")
        && let Some((_, Some(p))) = mig
    {
        plans.push(("mig", p));
    }
    Ok(plans)
}

/// Sets each action's owner (docs/report.md, "Owners"): the contacts of the teams of the
/// findings it answers, else (the plans) of the findings on its workloads' devices; `None`
/// (unknown) when no such team has one. Nothing is guessed from labels or names.
pub fn set_owners(actions: &mut [Action], findings: &[crate::advisor::Finding], owners: &Owners) {
    let team = |f: &crate::advisor::Finding| {
        crate::owners::team_of(f.entity.namespace.as_deref(), f.entity.slurm_job.as_deref())
    };
    let mut by_device: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for f in findings {
        if let Some(t) = team(f) {
            let e = &f.entity;
            let key = device_key(e.uuid.as_deref(), e.node.as_deref(), e.gpu, None);
            by_device.entry(key).or_default().push(t);
        }
    }
    for a in actions {
        let mut teams: Vec<String> = findings
            .iter()
            .filter(|f| a.findings.contains(&f.id))
            .filter_map(team)
            .collect();
        if teams.is_empty() {
            teams = a
                .workloads
                .iter()
                .filter_map(|w| by_device.get(w.key.split("/GI").next().unwrap_or(&w.key)))
                .flatten()
                .cloned()
                .collect();
        }
        a.owner = owners.of_teams(teams.iter().map(|t| Some(t.as_str())));
        teams.sort();
        teams.dedup();
        a.teams = teams;
    }
}

/// The action that answers finding `id`, and whether the finding's own suggestion lost.
pub fn for_finding<'a>(actions: &'a [Action], id: &str) -> Option<&'a Action> {
    actions.iter().find(|a| a.findings.iter().any(|f| f == id))
}

/// What an alert for finding `id` suggests: its action's headline and first command (or the
/// advice), saying when the finding's own suggestion lost to another action; `None` when no
/// action answers the finding (off-peak windows, busy-but-idle GPUs: their own suggestion).
pub fn alert_action(actions: &[Action], id: &str) -> Option<String> {
    let a = for_finding(actions, id)?;
    let how = match (a.steps.first(), &a.advice) {
        (Some(s), _) => format!("`{}`", s.command),
        (None, Some(adv)) => adv.clone(),
        (None, None) => a.done_by.clone(),
    };
    Some(format!("action {}: {how}", headline(a)))
}

/// One line of an action: rank, what, saving.
pub fn headline(a: &Action) -> String {
    let money = match (a.saving_per_month, &a.currency) {
        (Some(s), Some(c)) => format!("{s:.0} {c}/month, "),
        _ => String::new(),
    };
    format!(
        "{}. {} — {money}{:.0} GPU-h/month",
        a.rank, a.what, a.gpu_hours_per_month
    )
}

/// The text lines of the actions block (every text format): per action its headline, the
/// evidence, the verdict, then its commands in backticks or the advice.
pub fn lines(actions: &[Action]) -> Vec<String> {
    let mut out = Vec::new();
    if actions.is_empty() {
        out.push("Nothing to act on in this period.".to_string());
    }
    for a in actions {
        out.push(headline(a));
        out.push(format!("   evidence: {}", a.evidence));
        out.push(format!("   safe?: {}", a.verdict));
        for s in &a.steps {
            out.push(format!("   - {}: `{}`", s.what, s.command));
        }
        if let Some(adv) = &a.advice {
            out.push(format!("   advice: {adv}"));
        }
        out.push(format!("   done by: {}", a.done_by));
        out.push(format!(
            "   owner: {}",
            a.owner.as_deref().unwrap_or("unknown")
        ));
        // What it won over, per losing kind: how many workloads, and the first reason.
        let mut kinds: Vec<(&str, usize, &str)> = Vec::new();
        for o in &a.overruled {
            match kinds.iter_mut().find(|k| k.0 == o.candidate) {
                Some(k) => k.1 += 1,
                None => kinds.push((o.candidate, 1, &o.reason)),
            }
        }
        for (kind, n, reason) in kinds {
            out.push(format!(
                "   instead of: {} for {n} workload(s) ({reason})",
                kind.replace('_', " ")
            ));
        }
    }
    out
}

/// The text table `tessera analyze` prints: the analysed range, then the Actions block, then
/// each detector's findings ([`crate::advisor::render_table`]).
pub fn render_table(a: &crate::advisor::Analysis, actions: &[Action]) -> String {
    let table = crate::advisor::render_table(a);
    let (head, rest) = table.split_once('\n').unwrap_or((&table, ""));
    let mut s = format!("{head}\n\n== Actions — one per workload, most saved first\n");
    for l in lines(actions) {
        s.push_str(&format!(
            "  {}\n",
            crate::output::escape::printable_lines(&l)
        ));
    }
    s.push_str(rest);
    s
}
