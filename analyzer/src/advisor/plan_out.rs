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

/// The moves of every consolidation finding of `analysis`, in the findings' order.
pub fn consolidation_moves(analysis: &Analysis) -> Result<Vec<ConsolidationMove>, PlanOutError> {
    let mut moves = Vec::new();
    for f in &analysis.findings {
        let Evidence::Consolidation(ConsolidationEvidence { model, plan, .. }) = &f.evidence else {
            continue;
        };
        for group in plan {
            let own = group.workloads.iter().find(|w| w.uuid == group.host.uuid);
            let host = gpu_ref(&group.host, own.map(|w| w.label.as_str()))?;
            let guests = group
                .workloads
                .iter()
                .filter(|w| w.uuid != group.host.uuid)
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
        return Err(PlanOutError::NoMoves);
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
