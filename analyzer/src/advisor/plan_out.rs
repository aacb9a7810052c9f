//! The consolidation findings as a tessera plan file (`kind: tessera-plan`, docs/plan.md): one
//! move per group of a finding's plan — the host GPU (whose own work stays) and the guest GPUs
//! whose work would move onto it, shared. `tessera analyze --plan-out FILE` writes it;
//! `tessera replay` replays it against history.
//!
//! Pure: builds the plan value from an [`Analysis`]; the caller writes the file. It does not
//! choose a sharing method (MPS or time-slicing): that is the sharing config's job.

use tessera_core::mig::plan::TesseraPlan;
use tessera_core::mig::plan_sections::{ConsolidationMove, GpuRef, PlanWindow};

use super::evidence::{ConsolidationEvidence, PlanGpu};
use super::{Analysis, Evidence};

/// Why no plan file could be made.
#[derive(Debug, thiserror::Error)]
pub enum PlanOutError {
    #[error(
        "no consolidation finding in the analysed range: no move to write (was the consolidation detector run?)"
    )]
    NoMoves,
    #[error(
        "no consolidation move left: the workloads of every group are answered first by scaling to zero or releasing the device (see the Actions)"
    )]
    Answered,
    #[error("a consolidation group names a GPU without node or index ({0}): it cannot be moved")]
    Unnamed(String),
    #[error("internal error: the moves make an invalid plan")]
    Invalid(#[source] tessera_core::mig::plan::TesseraPlanError),
}

fn gpu_ref(g: &PlanGpu, label: Option<&str>) -> Result<GpuRef, PlanOutError> {
    match (&g.node, g.gpu) {
        (Some(node), Some(gpu)) => Ok(GpuRef {
            node: node.clone(),
            gpu,
            uuid: g.uuid.clone(),
            label: label.map(str::to_string),
        }),
        _ => Err(PlanOutError::Unnamed(label.unwrap_or("?").to_string())),
    }
}

/// The moves of every consolidation finding of `analysis`, in the findings' order, without the
/// workloads that come before any plan in `analysis.actions` (`super::actions`: a workload
/// scaled to zero or released is not moved; a group whose host is taken goes). Moves the MIG
/// layouts won over stay: this is the consolidation plan, asked for by name.
pub fn consolidation_moves(analysis: &Analysis) -> Result<Vec<ConsolidationMove>, PlanOutError> {
    let taken: std::collections::BTreeSet<&str> = analysis
        .actions
        .iter()
        .filter(|a| matches!(a.kind, "scale_to_zero" | "release"))
        .flat_map(|a| a.workloads.iter().map(|w| w.key.as_str()))
        .collect();
    let key = |uuid: &Option<String>, node: &Option<String>, gpu: Option<u32>| {
        super::actions::device_key(uuid.as_deref(), node.as_deref(), gpu, None)
    };
    let mut moves = Vec::new();
    for f in &analysis.findings {
        let Evidence::Consolidation(ConsolidationEvidence { model, plan, .. }) = &f.evidence else {
            continue;
        };
        for group in plan {
            if taken.contains(key(&group.host.uuid, &group.host.node, group.host.gpu).as_str()) {
                continue;
            }
            let own = group.workloads.iter().find(|w| w.uuid == group.host.uuid);
            let host = gpu_ref(&group.host, own.map(|w| w.label.as_str()))?;
            let guests = group
                .workloads
                .iter()
                .filter(|w| w.uuid != group.host.uuid)
                .filter(|w| !taken.contains(key(&w.uuid, &w.node, w.gpu).as_str()))
                .map(|w| {
                    gpu_ref(
                        &PlanGpu {
                            gpu: w.gpu,
                            node: w.node.clone(),
                            uuid: w.uuid.clone(),
                        },
                        Some(&w.label),
                    )
                })
                .collect::<Result<Vec<_>, _>>()?;
            if !guests.is_empty() {
                moves.push(ConsolidationMove {
                    model: model.clone(),
                    host,
                    guests,
                });
            }
        }
    }
    Ok(moves)
}

/// A tessera plan holding the consolidation moves of `analysis` and the window it analysed.
pub fn consolidation_plan(analysis: &Analysis) -> Result<TesseraPlan, PlanOutError> {
    let moves = consolidation_moves(analysis)?;
    if moves.is_empty() {
        let any = analysis
            .findings
            .iter()
            .any(|f| matches!(f.evidence, Evidence::Consolidation(_)));
        return Err(if any {
            PlanOutError::Answered
        } else {
            PlanOutError::NoMoves
        });
    }
    let mut plan = TesseraPlan::new();
    plan.comment = Some(format!(
        "tessera analyze {}: {} consolidation move(s) freeing {} GPU(s), sources {}",
        env!("CARGO_PKG_VERSION"),
        moves.len(),
        moves.iter().map(|m| m.guests.len()).sum::<usize>(),
        analysis.sources.join(", ")
    ));
    plan.window = match (&analysis.from, &analysis.until) {
        (Some(from), Some(until)) => Some(PlanWindow {
            from: from.clone(),
            until: until.clone(),
            sources: analysis.sources.clone(),
        }),
        _ => None,
    };
    plan.consolidation = moves;
    plan.validate("the consolidation moves")
        .map_err(PlanOutError::Invalid)?;
    Ok(plan)
}
