//! Validation of a parsed [`Scenario`]: the [`limits`] (counts only, checked before anything
//! proportional to them is built), then every cross reference (node and GPU names, MIG
//! placements against the model's table, workload placement) and value range.
//!
//! It does not read or parse files ([`super::parse`]).

mod workload;

use std::collections::HashMap;

use super::{FaultKind, FaultSpec, MigSpec, NodeSpec, SEE_LIMITS, Scenario, ScenarioError, limits};
use crate::input_limits;
use crate::mig::{self, GpuModel};

/// Each node's spec and GPU models, by name (built once: look-ups are not linear).
type NodeIndex<'a> = HashMap<&'a str, (&'a NodeSpec, Vec<&'static GpuModel>)>;

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
            if node.mig.len() as u64 > gpus * limits::MIG_LAYOUTS_PER_GPU {
                return Err(self.invalid(
                    item,
                    format!(
                        "{} MIG layouts for {gpus} GPU(s); expected at most {} per GPU over time{SEE_LIMITS}",
                        node.mig.len(),
                        limits::MIG_LAYOUTS_PER_GPU
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
        for (wi, w) in self.workloads.iter().enumerate() {
            if w.moves.len() > limits::MOVES_PER_WORKLOAD {
                return Err(self.invalid(
                    format!("workloads[{wi}] ({}).moves", w.name),
                    format!(
                        "{} moves; expected at most {}{SEE_LIMITS}",
                        w.moves.len(),
                        limits::MOVES_PER_WORKLOAD
                    ),
                ));
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
        let nodes = self.check_nodes()?;
        self.check_workloads(&nodes)?;
        self.check_allocations(&nodes)?;
        self.check_faults(&nodes)?;
        Ok(())
    }

    /// Every node: a name no other node has, known GPU models, at least one GPU, and MIG
    /// layouts that fit their GPU ([`Self::check_mig_layout`]). Returns the nodes by name.
    fn check_nodes(&self) -> Result<NodeIndex<'_>, ScenarioError> {
        let known: Vec<_> = mig::models().iter().map(|m| m.key).collect();
        // Each node's index and GPU models, by name (built once: look-ups are not linear).
        let mut nodes: NodeIndex<'_> = HashMap::new();
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
                self.check_mig_layout(node, mi, spec, &models, &item)?;
            }
            nodes.insert(&node.name, (node, models));
        }
        Ok(nodes)
    }

    /// One MIG layout of a node (`node.mig[mi]`, `item` naming the node): on a GPU that exists,
    /// its window in order and in force at no time another layout of the GPU is, and its
    /// instances placed as the GPU model allows.
    fn check_mig_layout(
        &self,
        node: &NodeSpec,
        mi: usize,
        spec: &MigSpec,
        models: &[&'static GpuModel],
        item: &str,
    ) -> Result<(), ScenarioError> {
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
        if let (Some(from), Some(until)) = (spec.from, spec.until)
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
        if let Some((oi, other)) = node.mig[..mi]
            .iter()
            .enumerate()
            .find(|(_, o)| o.gpu == spec.gpu && windows_overlap(o, spec))
        {
            return Err(self.invalid(
                &item,
                format!(
                    "GPU {} has two MIG layouts in force at once (this one {} and mig[{oi}] {}); \
                     give them from/until windows that do not overlap",
                    spec.gpu,
                    window_text(spec),
                    window_text(other)
                ),
            ));
        }
        let layout = self
            .mig_layout(model, spec)
            .map_err(|m| self.invalid(&item, m))?;
        mig::validate_layout(model, &layout).map_err(|e| self.invalid(&item, e.to_string()))?;
        Ok(())
    }

    /// Every allocation: on a node and GPU that exist, naming the MIG instance where the GPU has
    /// MIG, with a holder and its window in order.
    fn check_allocations(&self, nodes: &NodeIndex<'_>) -> Result<(), ScenarioError> {
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
            let span = (
                a.from.map(|f| f.timestamp()),
                a.until.map(|u| u.timestamp()),
            );
            self.check_mig_start(node, a.gpu, a.mig_start, span, &item)?;
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
        Ok(())
    }

    /// Every fault: on a node and (but for driver errors) a GPU that exist, its window in order,
    /// its count in range, and what its kind needs ([`Self::check_fault_kind`]).
    fn check_faults(&self, nodes: &NodeIndex<'_>) -> Result<(), ScenarioError> {
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
            self.check_fault_kind(f, &item)?;
        }
        Ok(())
    }

    /// What a fault's kind needs: xid and at for xid faults, at for ECC and row remapping,
    /// failure on row remapping only, a known field (and error kind) for NVML errors.
    fn check_fault_kind(&self, f: &FaultSpec, item: &str) -> Result<(), ScenarioError> {
        match f.kind {
            FaultKind::Xid if f.xid.is_none() || f.at.is_none() => {
                return Err(self.invalid(item, "xid faults need xid and at"));
            }
            FaultKind::Ecc if f.at.is_none() => {
                return Err(self.invalid(item, "ecc faults need at"));
            }
            FaultKind::RowRemap if f.at.is_none() => {
                return Err(self.invalid(item, "row_remap faults need at"));
            }
            _ if f.failure && f.kind != FaultKind::RowRemap => {
                return Err(self.invalid(item, "failure applies to row_remap faults only"));
            }
            FaultKind::NvmlError | FaultKind::NotSupported => {
                let field = f.field.as_deref().unwrap_or("");
                if crate::model::Field::parse(field).is_none() {
                    return Err(self.invalid(
                        item,
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
                            item,
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
        Ok(())
    }

    /// `mig_start` names an instance of the GPU's layout exactly when the GPU has MIG enabled,
    /// over the whole span `[from, until)` (unix seconds; `None`: open) in which the device is
    /// used: every layout in force during the span has an instance at `mig_start`, and MIG is
    /// not off during part of it.
    fn check_mig_start(
        &self,
        node: &NodeSpec,
        gpu: u32,
        mig_start: Option<u32>,
        span: (Option<i64>, Option<i64>),
        item: &str,
    ) -> Result<(), ScenarioError> {
        let layouts: Vec<&MigSpec> = node
            .mig
            .iter()
            .filter(|m| m.gpu == gpu && overlaps(window(m), span))
            .collect();
        let windowed = layouts.iter().any(|m| m.is_windowed());
        match (layouts.is_empty(), mig_start) {
            (false, Some(start)) => {
                for spec in &layouts {
                    if !spec.instances.iter().any(|i| i.start == start) {
                        let starts: Vec<_> = spec.instances.iter().map(|i| i.start).collect();
                        let when = if windowed {
                            format!(" of the layout {}", window_text(spec))
                        } else {
                            String::new()
                        };
                        return Err(self.invalid(
                            item,
                            format!(
                                "no MIG instance starts at slot {start}{when}; instances start at {starts:?}"
                            ),
                        ));
                    }
                }
                if let Some(t) = uncovered(&layouts, span) {
                    return Err(self.invalid(
                        item,
                        format!(
                            "mig_start given but GPU {gpu} has MIG off at {}; move the workload \
                             (moves) where the GPU's MIG layouts change",
                            time_text(t)
                        ),
                    ));
                }
            }
            (false, None) => {
                if windowed {
                    let spec = layouts[0];
                    return Err(self.invalid(
                        item,
                        format!(
                            "GPU {gpu} has MIG enabled {} while the workload is there: set mig_start \
                             to the instance's start slot, or move it (moves) when the layout changes",
                            window_text(spec)
                        ),
                    ));
                }
                return Err(self.invalid(
                    item,
                    "GPU has MIG enabled: set mig_start to the instance's start slot",
                ));
            }
            (true, Some(_)) => {
                return Err(self.invalid(item, "mig_start given but the GPU has no MIG layout"));
            }
            (true, None) => {}
        }
        Ok(())
    }
}

/// A layout's window in unix seconds (`None`: open).
fn window(m: &MigSpec) -> (Option<i64>, Option<i64>) {
    (
        m.from.map(|f| f.timestamp()),
        m.until.map(|u| u.timestamp()),
    )
}

/// Whether two half-open windows `[a, b)` share a second.
fn overlaps(x: (Option<i64>, Option<i64>), y: (Option<i64>, Option<i64>)) -> bool {
    let start = max_opt(x.0, y.0);
    let end = min_opt(x.1, y.1);
    start.zip(end).is_none_or(|(s, e)| s < e)
}

fn windows_overlap(a: &MigSpec, b: &MigSpec) -> bool {
    overlaps(window(a), window(b))
}

/// The later of two starts (`None`: open, the earliest).
fn max_opt(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// The earlier of two ends (`None`: open, the latest).
fn min_opt(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The first second of `span` that no layout of `layouts` (windows that do not overlap)
/// covers, if any; `i64::MIN` stands for "from the start".
fn uncovered(layouts: &[&MigSpec], span: (Option<i64>, Option<i64>)) -> Option<i64> {
    let mut windows: Vec<_> = layouts.iter().map(|m| window(m)).collect();
    windows.sort_by_key(|w| w.0.unwrap_or(i64::MIN));
    let mut at = span.0.unwrap_or(i64::MIN);
    let end = span.1.unwrap_or(i64::MAX);
    for (from, until) in windows {
        if at >= end {
            return None;
        }
        if from.unwrap_or(i64::MIN) > at {
            return Some(at);
        }
        at = at.max(until.unwrap_or(i64::MAX));
    }
    (at < end).then_some(at)
}

/// `from … until …` of a layout, for messages.
fn window_text(m: &MigSpec) -> String {
    let t = |d: Option<chrono::DateTime<chrono::Utc>>, open: &str| {
        d.map_or(open.to_string(), |d| d.to_rfc3339())
    };
    format!(
        "from {} until {}",
        t(m.from, "the start"),
        t(m.until, "the end")
    )
}

fn time_text(t: i64) -> String {
    if t == i64::MIN {
        return "the start".into();
    }
    chrono::DateTime::from_timestamp(t, 0).map_or_else(|| t.to_string(), |d| d.to_rfc3339())
}
