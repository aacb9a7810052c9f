//! GPUs before, after and freed by a plan: the one definition ([`GpuCount`]) that every plan
//! kind (MIG layouts, consolidation moves) and every output (`tessera mig plan`, `tessera
//! replay`, `tessera report`, `tessera analyze`) uses, and the one sentence for a MIG plan that
//! frees no GPU. A leaf: values and text only, no planning.

use serde::Serialize;

/// GPUs before and after a plan, and the difference: the one definition every plan kind (MIG,
/// consolidation) and every output (`mig plan`, `replay`, `report`, `analyze`) uses.
///
/// - `before`: the GPUs that hold loaded work in the period;
/// - `after`: the GPUs that hold work once the plan is in force — the GPUs the plan fills, the
///   GPUs kept for work it gives no other place (work keeps the GPU it has), and the GPUs of work
///   it leaves where it is; a GPU counts as freed only when nothing loaded remains on it;
/// - `freed`: `before − after`, negative when the plan needs more GPUs than today.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct GpuCount {
    pub before: u32,
    pub after: u32,
    pub freed: i64,
}

impl GpuCount {
    pub fn new(before: u32, after: u32) -> GpuCount {
        GpuCount {
            before,
            after,
            freed: i64::from(before) - i64::from(after),
        }
    }

    /// Whether the plan needs at least as many GPUs as today (it does not help).
    pub fn helps(&self) -> bool {
        self.freed > 0
    }

    /// `8 → 6 GPU(s), 2 freed` / `61 → 64 GPU(s), 3 more needed`.
    pub fn text(&self) -> String {
        match self.freed {
            f if f >= 0 => format!("{} → {} GPU(s), {f} freed", self.before, self.after),
            f => format!(
                "{} → {} GPU(s), {} more needed",
                self.before, self.after, -f
            ),
        }
    }
}

/// The one line for a MIG plan that does not reduce GPUs: it says so and points to the plan that
/// may help (consolidation by sharing, `tessera analyze`/`tessera share plan`).
pub fn does_not_help_sentence(count: &GpuCount) -> String {
    let how = if count.freed == 0 {
        "as many GPUs as today".to_string()
    } else {
        format!("{} more GPU(s) than today", -count.freed)
    };
    format!(
        "MIG does not help here: its layouts need {how} (isolated instances cost more than the sharing the workloads have now); follow the consolidation plan instead (tessera analyze, tessera share plan)."
    )
}
