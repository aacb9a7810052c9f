//! The MIG layouts as the actions' candidate, for every output that recommends: the report
//! (whose pass measured the demand already: [`mig_candidate`]) and `analyze` / `notify`
//! ([`add_mig`]: measures the demand over the same partitions, plans, and recomputes the
//! analysis' actions with it), so that all three give a workload the same action.
//!
//! It reads frames (the demand) and runs the MIG planner; it prints nothing and writes no file.

use crate::advisor::Analysis;
use crate::frames::Frames;
use crate::mig_planner::{self, PlannerOptions, demand};

use super::{ActionContext, MigCandidate, recommend};

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

/// The MIG candidate of `parts` over `(since, until]`, when the planner places anything; a
/// fleet without MIG-capable GPUs (or a planner error) has none.
pub fn plan_mig(
    parts: &[&Frames],
    range: (i64, i64),
) -> Result<Option<MigCandidate>, demand::DemandError> {
    let cur: Vec<Frames> = parts.iter().map(|f| f.within(range.0, range.1)).collect();
    let refs: Vec<&Frames> = cur.iter().collect();
    let d = demand::extract_parts_with(&refs, &demand::DemandParams::default(), &|_| {})?;
    Ok(
        match mig_planner::plan(&d.workloads, &d.fleet, &PlannerOptions::default()) {
            Ok(plan) if !plan.gpus.is_empty() => Some(mig_candidate(&d, &plan)),
            _ => None,
        },
    )
}

/// Recompute `analysis.actions` with the MIG layouts of `parts` as a candidate (unpriced, as
/// `analyze` and `notify` print them).
pub fn add_mig(
    analysis: &mut Analysis,
    parts: &[&Frames],
    range: (i64, i64),
) -> Result<(), demand::DemandError> {
    let mig = plan_mig(parts, range)?;
    if mig.is_none() {
        return Ok(());
    }
    analysis.actions = recommend(
        &analysis.findings,
        mig.as_ref(),
        &ActionContext {
            sources: &analysis.sources,
            period_hours: (range.1 - range.0).max(0) as f64 / 3.6e6,
            prices: None,
        },
    );
    Ok(())
}
