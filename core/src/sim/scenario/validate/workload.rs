//! Validation of a scenario's workloads: unique names, a node and GPU that exist, values in
//! range (levels, window, schedule, calendar), moves in time order inside the window, and the
//! MIG instance named wherever the workload runs on a GPU with MIG.
//!
//! It does not check nodes, allocations or faults, nor the counts of the limits (the parent
//! module, [`super`]).

use std::collections::HashSet;

use super::super::{Scenario, ScenarioError, WorkloadKind, WorkloadSpec, limits};
use super::{NodeIndex, max_opt, min_opt};
use crate::mig::GpuModel;

impl Scenario {
    /// Every workload: a name no other workload has, on a node and GPU that exist, its values
    /// in range, its moves in order, and its MIG instance named wherever it runs.
    pub(super) fn check_workloads(&self, nodes: &NodeIndex<'_>) -> Result<(), ScenarioError> {
        let mut names = HashSet::new();
        for (wi, w) in self.workloads.iter().enumerate() {
            let item = format!("workloads[{wi}] ({})", w.name);
            if w.name.is_empty() {
                return Err(self.invalid(item, "a workload needs a name"));
            }
            if !names.insert(w.name.as_str()) {
                return Err(self.invalid(item, "duplicate workload name"));
            }
            let (_, models) = nodes
                .get(w.node.as_str())
                .ok_or_else(|| self.invalid(&item, format!("unknown node {:?}", w.node)))?;
            let model = models.get(w.gpu as usize).ok_or_else(|| {
                self.invalid(
                    &item,
                    format!(
                        "GPU {} does not exist on {} (it has {})",
                        w.gpu,
                        w.node,
                        models.len()
                    ),
                )
            })?;
            self.check_workload_values(w, model, &item)?;
            self.check_moves(w, nodes, &item)?;
            self.check_places(w, nodes, &item)?;
        }
        Ok(())
    }

    /// Each place a workload runs (where it starts, then where each move takes it): the MIG
    /// instance named over the span it runs there, within its own window.
    fn check_places(
        &self,
        w: &WorkloadSpec,
        nodes: &NodeIndex<'_>,
        item: &str,
    ) -> Result<(), ScenarioError> {
        let (from, until) = (
            w.from.map(|f| f.timestamp()),
            w.until.map(|u| u.timestamp()),
        );
        for (pi, place) in w.places().enumerate() {
            let item = if pi == 0 {
                item.to_string()
            } else {
                format!("{item}.moves[{}]", pi - 1)
            };
            let Some((node, _)) = nodes.get(place.node) else {
                continue; // check_moves named it
            };
            // The span it runs there, within its own window.
            let a = max_opt(place.from, from);
            let b = min_opt(place.until, until);
            if a.zip(b).is_some_and(|(a, b)| b <= a) {
                continue;
            }
            self.check_mig_start(node, place.gpu, place.mig_start, (a, b), &item)?;
        }
        Ok(())
    }

    /// The moves of one workload: in order of `at`, inside its window, to a node and GPU that
    /// exist.
    fn check_moves(
        &self,
        w: &WorkloadSpec,
        nodes: &NodeIndex<'_>,
        item: &str,
    ) -> Result<(), ScenarioError> {
        let mut last = w.from;
        for (mi, (m, place)) in w.moves.iter().zip(w.places().skip(1)).enumerate() {
            let item = format!("{item}.moves[{mi}]");
            if let Some(prev) = last
                && m.at <= prev
            {
                return Err(self.invalid(
                    &item,
                    format!(
                        "at ({}) must be after {} ({}): moves are in time order, inside the \
                         workload's window",
                        m.at.to_rfc3339(),
                        if mi == 0 {
                            "the workload's from"
                        } else {
                            "the previous move"
                        },
                        prev.to_rfc3339()
                    ),
                ));
            }
            if let Some(until) = w.until
                && m.at >= until
            {
                return Err(self.invalid(
                    &item,
                    format!(
                        "at ({}) must be before the workload's until ({})",
                        m.at.to_rfc3339(),
                        until.to_rfc3339()
                    ),
                ));
            }
            last = Some(m.at);
            let (_, models) = nodes
                .get(place.node)
                .ok_or_else(|| self.invalid(&item, format!("unknown node {:?}", place.node)))?;
            let model = models.get(m.gpu as usize).ok_or_else(|| {
                self.invalid(
                    &item,
                    format!(
                        "GPU {} does not exist on {} (it has {})",
                        m.gpu,
                        place.node,
                        models.len()
                    ),
                )
            })?;
            let mem_total = model.memory_total_bytes as f64 / (1u64 << 30) as f64;
            if w.memory_gib > mem_total {
                return Err(self.invalid(
                    &item,
                    format!(
                        "memory_gib = {} does not fit a {} ({mem_total:.1} GiB)",
                        w.memory_gib, model.key
                    ),
                ));
            }
        }
        Ok(())
    }

    /// A workload's values: its levels, window, schedule and calendar in range, and its burst
    /// probability a ratio.
    fn check_workload_values(
        &self,
        w: &WorkloadSpec,
        model: &GpuModel,
        item: &str,
    ) -> Result<(), ScenarioError> {
        self.check_workload_levels(w, model, item)?;
        self.check_workload_window(w, item)?;
        self.check_workload_schedule(w, item)?;
        self.check_workload_calendar(w, item)?;
        if let Some(p) = w.burst_probability
            && !(0.0..=1.0).contains(&p)
        {
            return Err(self.invalid(item, format!("burst_probability = {p}; expected 0–1")));
        }
        Ok(())
    }

    /// Peak, base and noise ratios in 0–1, efficiency in (0, 1], and memory that fits the GPU.
    fn check_workload_levels(
        &self,
        w: &WorkloadSpec,
        model: &GpuModel,
        item: &str,
    ) -> Result<(), ScenarioError> {
        for (name, v) in [("peak", w.peak), ("base", w.base), ("noise", w.noise)] {
            if !(0.0..=1.0).contains(&v) {
                return Err(self.invalid(item, format!("{name} = {v}; expected a ratio in 0–1")));
            }
        }
        if !(w.efficiency > 0.0 && w.efficiency <= 1.0) {
            return Err(self.invalid(
                item,
                format!("efficiency = {}; expected 0 < efficiency ≤ 1", w.efficiency),
            ));
        }
        let mem_total = model.memory_total_bytes as f64 / (1u64 << 30) as f64;
        if !(w.memory_gib >= 0.0 && w.memory_gib <= mem_total) {
            return Err(self.invalid(
                item,
                format!(
                    "memory_gib = {}; expected 0–{mem_total:.1} for {}",
                    w.memory_gib, model.key
                ),
            ));
        }
        Ok(())
    }

    /// The window (until after from), the run length (duration_hours, every_hours and
    /// duration_minutes) in range.
    fn check_workload_window(&self, w: &WorkloadSpec, item: &str) -> Result<(), ScenarioError> {
        if let (Some(from), Some(until)) = (w.from, w.until)
            && until <= from
        {
            return Err(self.invalid(
                item,
                format!(
                    "until ({}) must be after from ({})",
                    until.to_rfc3339(),
                    from.to_rfc3339()
                ),
            ));
        }
        if let Some(d) = w.duration_hours
            && !(d > 0.0 && d <= limits::DURATION_HOURS)
        {
            return Err(self.invalid(
                item,
                format!(
                    "duration_hours = {d}; expected more than 0 and at most {} (a week)",
                    limits::DURATION_HOURS
                ),
            ));
        }
        for (name, v) in [
            ("every_hours", w.every_hours),
            ("duration_minutes", w.duration_minutes),
        ] {
            if let Some(v) = v
                && !(v.is_finite() && v > 0.0)
            {
                return Err(self.invalid(
                    item,
                    format!("{name} = {v}; expected a finite number more than 0"),
                ));
            }
        }
        Ok(())
    }

    /// What the kind needs to be scheduled: training both start_hour and duration_hours (or
    /// neither), batch every_hours and duration_minutes, a run no longer than its period.
    fn check_workload_schedule(&self, w: &WorkloadSpec, item: &str) -> Result<(), ScenarioError> {
        let training_half_scheduled = w.start_hour.is_none() != w.duration_hours.is_none();
        if w.kind == WorkloadKind::Training && training_half_scheduled {
            return Err(self.invalid(
                item,
                "training needs both start_hour and duration_hours (or neither, with from/until)",
            ));
        }
        match (w.kind, w.every_hours, w.duration_minutes) {
            (WorkloadKind::Batch, Some(every), Some(minutes)) if minutes > every * 60.0 => {
                return Err(self.invalid(
                    item,
                    format!(
                        "duration_minutes = {minutes} is longer than every_hours = {every} ({} minutes): a run must end before the next starts",
                        every * 60.0
                    ),
                ));
            }
            (WorkloadKind::Batch, None, _) | (WorkloadKind::Batch, _, None) => {
                return Err(
                    self.invalid(item, "batch needs every_hours > 0 and duration_minutes > 0")
                );
            }
            _ => {}
        }
        Ok(())
    }

    /// The start hour within a day and the days known weekdays, none twice.
    fn check_workload_calendar(&self, w: &WorkloadSpec, item: &str) -> Result<(), ScenarioError> {
        if let Some(h) = w.start_hour
            && !(0.0..24.0).contains(&h)
        {
            return Err(self.invalid(item, format!("start_hour = {h}; expected 0 ≤ hour < 24")));
        }
        if let Some(days) = &w.days {
            let mut seen = [false; 7];
            for d in days {
                let Some(i) = super::super::weekday_index(d) else {
                    return Err(self.invalid(
                        item,
                        format!(
                            "unknown weekday {d:?}; expected mon, tue, wed, thu, fri, sat or sun"
                        ),
                    ));
                };
                if std::mem::replace(&mut seen[i as usize], true) {
                    return Err(self.invalid(item, format!("days lists {d:?} twice")));
                }
            }
        }
        Ok(())
    }
}
