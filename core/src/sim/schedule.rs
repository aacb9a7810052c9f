//! MIG layouts that change over time: a scenario's `mig` entries with `from`/`until` windows
//! ([`ScheduledLayout`]), put in force on a simulated node's GPUs as the virtual clock crosses a
//! window's edge ([`crossed`]; the node's read applies it and bumps its layout epoch so that
//! callers re-read the inventory).
//!
//! It does not validate windows (the scenario's validation does) and does not move workloads
//! (each workload's place at an instant is `WorkloadSpec::place_at`).

/// One of a GPU's layouts over time (its instances `I`): in force for the unix seconds
/// `[from, until)`.
#[derive(Debug, Clone)]
pub struct ScheduledLayout<I> {
    pub from: Option<i64>,
    pub until: Option<i64>,
    pub instances: Vec<I>,
}

impl<I> ScheduledLayout<I> {
    /// Whether it is in force at unix second `t`.
    pub fn in_force(&self, t: i64) -> bool {
        self.from.is_none_or(|f| t >= f) && self.until.is_none_or(|u| t < u)
    }
}

/// The index of the layout in force at `t` (`None`: none, MIG off), when it is not `last`
/// (the one put in force before): `Some(new)` exactly when a window's edge was crossed.
pub fn crossed<I>(
    schedule: &[ScheduledLayout<I>],
    last: Option<Option<usize>>,
    t: i64,
) -> Option<Option<usize>> {
    let k = schedule.iter().position(|l| l.in_force(t));
    (last != Some(k)).then_some(k)
}
