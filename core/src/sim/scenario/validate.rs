//! Validation of a parsed [`Scenario`]: the [`limits`] (counts only, checked before anything
//! proportional to them is built), then every cross reference (node and GPU names, MIG
//! placements against the model's table, workload placement) and value range.
//!
//! It does not read or parse files ([`super::parse`]).

use std::collections::{HashMap, HashSet};

use super::{
    FaultKind, NodeSpec, SEE_LIMITS, Scenario, ScenarioError, WorkloadKind, WorkloadSpec, limits,
};
use crate::input_limits;
use crate::mig::{self, GpuModel};

impl Scenario {
    fn invalid(&self, item: impl Into<String>, message: impl Into<String>) -> ScenarioError {
        ScenarioError::Invalid {
            path: self.source.clone(),
            item: item.into(),
            message: input_limits::clip(&message.into()),
        }
    }

    /// The [`limits`]: counts only, before anything proportional to them is built.
    fn check_limits(&self) -> Result<(), ScenarioError> {
        for (what, n, max) in [
            ("nodes", self.nodes.len(), limits::NODES),
            ("workloads", self.workloads.len(), limits::WORKLOADS),
            ("faults", self.faults.len(), limits::FAULTS),
            ("allocations", self.allocations.len(), limits::ALLOCATIONS),
        ] {
            if n > max {
                return Err(self.invalid(
                    what,
                    format!("{n} {what}; expected at most {max}{SEE_LIMITS}"),
                ));
            }
        }
        for (ni, node) in self.nodes.iter().enumerate() {
            let item = format!("nodes[{ni}] ({})", node.name);
            if let Some(gi) = node.gpus.iter().position(|g| g.count == 0) {
                return Err(self.invalid(
                    format!("{item}.gpus[{gi}]"),
                    "count = 0; expected at least 1 GPU in a group",
                ));
            }
            // At most 2^32 groups' worth of text fits no file; each count is below 2^32.
            let gpus: u64 = node.gpus.iter().map(|g| g.count as u64).sum();
            if gpus > limits::GPUS_PER_NODE {
                return Err(self.invalid(
                    format!("{item}.gpus"),
                    format!(
                        "{gpus} GPUs; expected at most {} per node{SEE_LIMITS}",
                        limits::GPUS_PER_NODE
                    ),
                ));
            }
            if node.mig.len() as u64 > gpus {
                return Err(self.invalid(
                    item,
                    format!(
                        "{} MIG layouts for {gpus} GPU(s); expected at most one per GPU",
                        node.mig.len()
                    ),
                ));
            }
            for (mi, m) in node.mig.iter().enumerate() {
                if m.instances.len() > limits::MIG_INSTANCES_PER_GPU {
                    return Err(self.invalid(
                        format!("{item}.mig[{mi}]"),
                        format!(
                            "{} MIG instances; expected at most {} per GPU{SEE_LIMITS}",
                            m.instances.len(),
                            limits::MIG_INSTANCES_PER_GPU
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Check the [`limits`], then every cross reference and value range. Linear in the size
    /// of the scenario.
    pub fn validate(&self) -> Result<(), ScenarioError> {
        self.check_limits()?;
        if !limits::UTC_OFFSET_HOURS.contains(&self.utc_offset_hours) {
            return Err(self.invalid(
                "utc_offset_hours",
                format!(
                    "utc_offset_hours = {}; expected {} to {} (hours from UTC)",
                    self.utc_offset_hours,
                    limits::UTC_OFFSET_HOURS.start(),
                    limits::UTC_OFFSET_HOURS.end()
                ),
            ));
        }
        if self.nodes.is_empty() {
            return Err(self.invalid("nodes", "a scenario needs at least one node"));
        }
        let known: Vec<_> = mig::models().iter().map(|m| m.key).collect();
        // Each node's index and GPU models, by name (built once: look-ups are not linear).
        let mut nodes: HashMap<&str, (&NodeSpec, Vec<&'static GpuModel>)> = HashMap::new();
        for (ni, node) in self.nodes.iter().enumerate() {
            let item = format!("nodes[{ni}] ({})", node.name);
            if node.name.is_empty() {
                return Err(self.invalid(item, "a node needs a name"));
            }
            if nodes.contains_key(node.name.as_str()) {
                return Err(self.invalid(item, "duplicate node name"));
            }
            for g in &node.gpus {
                if mig::model(&g.model).is_none() {
                    return Err(self.invalid(
                        item,
                        format!(
                            "unknown GPU model {:?}; expected one of {}",
                            g.model,
                            known.join(", ")
                        ),
                    ));
                }
            }
            let models = self.node_models(node);
            if models.is_empty() {
                return Err(self.invalid(item, "a node needs at least one GPU"));
            }
            for (mi, spec) in node.mig.iter().enumerate() {
                let item = format!("{item}.mig[{mi}]");
                let model = models.get(spec.gpu as usize).ok_or_else(|| {
                    self.invalid(
                        &item,
                        format!(
                            "GPU {} does not exist (node has {})",
                            spec.gpu,
                            models.len()
                        ),
                    )
                })?;
                if node.mig[..mi].iter().any(|o| o.gpu == spec.gpu) {
                    return Err(
                        self.invalid(&item, format!("GPU {} has two MIG layouts", spec.gpu))
                    );
                }
                let layout = self
                    .mig_layout(model, spec)
                    .map_err(|m| self.invalid(&item, m))?;
                mig::validate_layout(model, &layout)
                    .map_err(|e| self.invalid(&item, e.to_string()))?;
            }
            nodes.insert(&node.name, (node, models));
        }
        let mut names = HashSet::new();
        for (wi, w) in self.workloads.iter().enumerate() {
            let item = format!("workloads[{wi}] ({})", w.name);
            if w.name.is_empty() {
                return Err(self.invalid(item, "a workload needs a name"));
            }
            if !names.insert(w.name.as_str()) {
                return Err(self.invalid(item, "duplicate workload name"));
            }
            let (node, models) = nodes
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
            self.check_mig_start(node, w.gpu, w.mig_start, &item)?;
            self.check_workload_values(w, model, &item)?;
        }
        for (ai, a) in self.allocations.iter().enumerate() {
            let item = format!("allocations[{ai}]");
            let (node, models) = nodes
                .get(a.node.as_str())
                .ok_or_else(|| self.invalid(&item, format!("unknown node {:?}", a.node)))?;
            if a.gpu as usize >= models.len() {
                return Err(self.invalid(
                    &item,
                    format!(
                        "GPU {} does not exist on {} (it has {})",
                        a.gpu,
                        a.node,
                        models.len()
                    ),
                ));
            }
            self.check_mig_start(node, a.gpu, a.mig_start, &item)?;
            if a.pod.is_none() && a.slurm_job.is_none() {
                return Err(self.invalid(
                    &item,
                    "an allocation needs a holder: pod (with namespace) or slurm_job",
                ));
            }
            if let (Some(from), Some(until)) = (a.from, a.until)
                && until <= from
            {
                return Err(self.invalid(
                    &item,
                    format!(
                        "until ({}) must be after from ({})",
                        until.to_rfc3339(),
                        from.to_rfc3339()
                    ),
                ));
            }
        }
        for (fi, f) in self.faults.iter().enumerate() {
            let item = format!("faults[{fi}] ({:?})", f.kind);
            let (_, models) = nodes
                .get(f.node.as_str())
                .ok_or_else(|| self.invalid(&item, format!("unknown node {:?}", f.node)))?;
            let gpus = models.len() as u32;
            if f.kind != FaultKind::DriverError {
                match f.gpu {
                    None => return Err(self.invalid(&item, "gpu is required")),
                    Some(g) if g >= gpus => {
                        return Err(self.invalid(
                            &item,
                            format!("GPU {g} does not exist on {} (it has {gpus})", f.node),
                        ));
                    }
                    _ => {}
                }
            }
            if let (Some(at), Some(until)) = (f.at, f.until)
                && until <= at
            {
                return Err(self.invalid(
                    &item,
                    format!(
                        "until ({}) must be after at ({})",
                        until.to_rfc3339(),
                        at.to_rfc3339()
                    ),
                ));
            }
            if let Some(c) = f.count
                && !(1..=limits::FAULT_COUNT).contains(&c)
            {
                return Err(self.invalid(
                    &item,
                    format!("count = {c}; expected 1–{}", limits::FAULT_COUNT),
                ));
            }
            match f.kind {
                FaultKind::Xid if f.xid.is_none() || f.at.is_none() => {
                    return Err(self.invalid(&item, "xid faults need xid and at"));
                }
                FaultKind::Ecc if f.at.is_none() => {
                    return Err(self.invalid(&item, "ecc faults need at"));
                }
                FaultKind::RowRemap if f.at.is_none() => {
                    return Err(self.invalid(&item, "row_remap faults need at"));
                }
                _ if f.failure && f.kind != FaultKind::RowRemap => {
                    return Err(self.invalid(&item, "failure applies to row_remap faults only"));
                }
                FaultKind::NvmlError | FaultKind::NotSupported => {
                    let field = f.field.as_deref().unwrap_or("");
                    if crate::model::Field::parse(field).is_none() {
                        return Err(self.invalid(
                            &item,
                            format!(
                                "field {field:?}; expected one of {}",
                                crate::model::Field::names().join(", ")
                            ),
                        ));
                    }
                    if f.kind == FaultKind::NvmlError {
                        let e = f.error.as_deref().unwrap_or("unknown");
                        if !crate::model::ERROR_KINDS.contains(&e) {
                            return Err(self.invalid(
                                &item,
                                format!(
                                    "error {e:?}; expected one of {}",
                                    crate::model::ERROR_KINDS.join(", ")
                                ),
                            ));
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The value ranges of one workload on a GPU of `model`: ratios in 0–1, finite durations
    /// and periods, a window that ends after it starts.
    /// `mig_start` names an instance of the GPU's layout exactly when the GPU has MIG enabled.
    fn check_mig_start(
        &self,
        node: &NodeSpec,
        gpu: u32,
        mig_start: Option<u32>,
        item: &str,
    ) -> Result<(), ScenarioError> {
        let mig = node.mig.iter().find(|m| m.gpu == gpu);
        match (mig, mig_start) {
            (Some(spec), Some(start)) => {
                if !spec.instances.iter().any(|i| i.start == start) {
                    let starts: Vec<_> = spec.instances.iter().map(|i| i.start).collect();
                    return Err(self.invalid(
                        item,
                        format!(
                            "no MIG instance starts at slot {start}; instances start at {starts:?}"
                        ),
                    ));
                }
            }
            (Some(_), None) => {
                return Err(self.invalid(
                    item,
                    "GPU has MIG enabled: set mig_start to the instance's start slot",
                ));
            }
            (None, Some(_)) => {
                return Err(self.invalid(item, "mig_start given but the GPU has no MIG layout"));
            }
            (None, None) => {}
        }
        Ok(())
    }

    fn check_workload_values(
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
        if let Some(h) = w.start_hour
            && !(0.0..24.0).contains(&h)
        {
            return Err(self.invalid(item, format!("start_hour = {h}; expected 0 ≤ hour < 24")));
        }
        if let Some(days) = &w.days {
            let mut seen = [false; 7];
            for d in days {
                let Some(i) = super::weekday_index(d) else {
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
        if let Some(p) = w.burst_probability
            && !(0.0..=1.0).contains(&p)
        {
            return Err(self.invalid(item, format!("burst_probability = {p}; expected 0–1")));
        }
        Ok(())
    }
}
