//! The report's out-of-sample check (`tessera report --out-of-sample`, docs/report.md): for its
//! own kinds of plan (consolidation moves, MIG layouts), a plan made from the previous period
//! and replayed on the reported one (`tessera replay`'s model, docs/replay.md) — "planned from
//! Nov 9–16, replayed on Nov 16–23: safe, 0 failed intervals, p99 memory 81% of the instance".
//!
//! This module holds the figures (their text section is `render`'s); making the plans and replaying them is
//! `crate::replay::train::out_of_sample`'s (the command calls it: the report does not, so the
//! default report costs nothing more).

use serde::Serialize;

/// One out-of-sample check: the plan of one kind made from the previous period and replayed on
/// the report's, or why there was none.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OutOfSample {
    /// `mig` or `consolidation`.
    pub kind: &'static str,
    pub trained_from: String,
    pub trained_until: String,
    pub replayed_from: String,
    pub replayed_until: String,
    /// Why no plan or no replay was made (nothing to consolidate, no MIG GPU, no rows); `null`
    /// when there is a replay.
    pub skipped: Option<String>,
    /// `safe`, `tight` or `unsafe`; `null` when skipped.
    pub verdict: Option<&'static str>,
    pub failed_intervals: Option<u64>,
    pub gpus_before: Option<u32>,
    pub gpus_after: Option<u32>,
    pub gpu_hours_freed: Option<f64>,
    /// The largest p99 memory of a placement, as a share of its capacity (where known).
    pub p99_memory_share_max: Option<f64>,
    /// The placements and workloads that decided the verdict.
    pub deciding: Vec<String>,
}
