//! The placements a plan makes and their capacity (docs/replay.md, "Model"): every MIG
//! instance of a replayed config that holds workloads (capacity: the profile's memory and compute
//! slices from `tessera_core::mig`'s tables), every whole GPU of a config that holds workloads
//! (the model's memory and compute slices), and every consolidation host with its own work and
//! its guests' (the host's full memory and one GPU of compute). Also which config is in force
//! when (`--config`, the only config, or the plan's `schedule`), and the refusals: a plan that
//! says where no workload's rows are (a first-format `tessera-mig-plan`, a config without a
//! `workloads` section), several configs and no schedule, and — once the data is read
//! ([`check_in_data`]) — nodes and GPUs the data does not have.
//!
//! This module reads no rows and judges nothing (that is `combine`).

use std::collections::{BTreeMap, BTreeSet};

use tessera_core::mig::plan::{GpuLayout, MIG_PLAN_KIND, MigSchedule, SCHEDULE_KIND, TesseraPlan};
use tessera_core::mig::plan_sections::{WorkloadKind, WorkloadSource};
use tessera_core::mig::{self, GpuModel};

use super::ReplayError;
use super::series::Extracted;

/// One placement: where some workloads run after the plan, under one config (or always).
#[derive(Debug, Clone)]
pub struct Target {
    pub id: String,
    /// `None`: a consolidation move, in force all the time.
    pub config: Option<String>,
    /// `mig`, `gpu` or `shared`.
    pub kind: &'static str,
    pub node: Option<String>,
    pub gpu: u32,
    pub model: String,
    pub profile: Option<String>,
    /// `None` when the model is unknown to tessera's tables (a consolidation host of another
    /// model: its measured memory total is used).
    pub memory_bytes: Option<u64>,
    pub slices: u32,
    /// Compute slices of the whole GPU the target is on.
    pub gpu_slices: u32,
    /// Ids of the workloads with rows (keys of [`Targets::sources`]).
    pub members: Vec<String>,
    /// Workloads the config names without a `workloads` entry (a placeholder such as the night
    /// layout's `training`): no rows to replay, but the GPU is in use.
    pub placeholders: Vec<String>,
    /// Where in the plan file it comes from (for errors).
    pub item: String,
}

/// Everything the replay needs from the plan.
#[derive(Debug, Clone, Default)]
pub struct Targets {
    /// Every workload with rows to move, by id: the `workloads` section, and the consolidation
    /// moves' GPUs (`node/GPUn`, kind gpu).
    pub sources: BTreeMap<String, WorkloadSource>,
    /// Where each source comes from in the plan file (for errors).
    pub source_items: BTreeMap<String, String>,
    pub targets: Vec<Target>,
    /// The config in force all the time (`--config`, or the plan's only one).
    pub fixed: Option<String>,
    /// The plan's schedule, when it chooses the config.
    pub schedule: Option<MigSchedule>,
    /// The configs replayed.
    pub configs: Vec<String>,
    /// Per config: workload id → index of its target.
    pub placed: BTreeMap<String, BTreeMap<String, usize>>,
    pub notes: Vec<String>,
}

impl Targets {
    /// The config in force at `ts_ms` (`None` for a plan without configs).
    pub fn config_at(&self, ts_ms: i64) -> Option<&str> {
        if let Some(f) = &self.fixed {
            return Some(f);
        }
        let s = self.schedule.as_ref()?;
        let at = chrono::DateTime::from_timestamp_millis(ts_ms)?;
        let active = s.active_at(at)?;
        self.configs
            .iter()
            .find(|c| **c == active.config)
            .map(String::as_str)
    }
}

fn model_of(name: &str) -> Option<&'static GpuModel> {
    mig::model(name).or_else(|| mig::model_by_nvml_name(name))
}

/// The refusal for a plan that says where no workload's rows are.
fn no_workloads(kind: &str) -> ReplayError {
    ReplayError::Plan(format!(
        "this plan (kind {kind}) has MIG configs but no workloads section: it says which layouts to make, not where each workload's rows are in history, so nothing can be replayed; re-plan with `tessera mig plan -o FILE` (it writes kind tessera-plan with the workloads section, docs/plan.md)"
    ))
}

/// The placements of `plan`; `config` is `--config`.
/// Which configs of `plan` are in force when, into `t`: `config` alone, else those the
/// schedule switches to, else the only one; several configs and no schedule are refused.
fn configs_in_force(
    plan: &TesseraPlan,
    config: Option<&str>,
    t: &mut Targets,
) -> Result<(), ReplayError> {
    if plan.configs.is_empty() {
        return Ok(());
    }
    let labels = || plan.configs.keys().cloned().collect::<Vec<_>>().join(", ");
    match (config, &plan.schedule) {
        (Some(c), _) => {
            if !plan.configs.contains_key(c) {
                return Err(ReplayError::Plan(format!(
                    "no config labelled {c:?} in the plan (configs: {})",
                    labels()
                )));
            }
            t.fixed = Some(c.to_string());
            t.configs = vec![c.to_string()];
        }
        (None, Some(s)) => {
            t.schedule = Some(MigSchedule {
                version: "v1".into(),
                kind: SCHEDULE_KIND.into(),
                timezone: s.timezone.clone(),
                plan: String::new(),
                comment: None,
                switches: s.switches.clone(),
            });
            let named: BTreeSet<&str> = s.switches.iter().map(|w| w.config.as_str()).collect();
            t.configs = named.into_iter().map(str::to_string).collect();
        }
        (None, None) if plan.configs.len() == 1 => {
            let only = plan.configs.keys().next().cloned().unwrap_or_default();
            t.fixed = Some(only.clone());
            t.configs = vec![only];
        }
        (None, None) => {
            return Err(ReplayError::Plan(format!(
                "the plan has several configs ({}) and no schedule: choose one with --config LABEL",
                labels()
            )));
        }
    }
    Ok(())
}

/// The targets of config `label` (its GPUs `gpus`) into `t`: each MIG instance and each whole
/// GPU that holds workloads, with notes on names without a workloads entry and workloads placed
/// twice; the workloads it places are added to `used`. Returns each workload's target index.
fn place_config(
    t: &mut Targets,
    label: &str,
    gpus: &[GpuLayout],
    used: &mut BTreeSet<String>,
) -> Result<BTreeMap<String, usize>, ReplayError> {
    let mut placed = BTreeMap::new();
    for (i, g) in gpus.iter().enumerate() {
        let item = format!("configs.{label}[{i}]");
        let Some(model) = model_of(&g.model) else {
            return Err(ReplayError::Plan(format!(
                "{item}: unknown GPU model {:?}",
                g.model
            )));
        };
        let mut add = |t: &mut Targets,
                       kind: &'static str,
                       profile: Option<(String, u32)>,
                       memory: u64,
                       slices: u32,
                       names: &[String]| {
            let (members, placeholders): (Vec<String>, Vec<String>) = names
                .iter()
                .cloned()
                .partition(|n| t.sources.contains_key(n));
            for p in &placeholders {
                t.notes.push(format!(
                    "{p} (config {label}) has no workloads entry: the plan names no rows for it, so it is not replayed (unknown)"
                ));
            }
            let node = g.node.clone().or_else(|| {
                members
                    .iter()
                    .find_map(|m| t.sources.get(m).map(|s| s.node.clone()))
            });
            let where_ = format!("{}/GPU{}", node.as_deref().unwrap_or("any node"), g.gpu);
            let id = match &profile {
                Some((name, start)) => format!("{label} {where_} {name}@{start}"),
                None => format!("{label} {where_} whole GPU"),
            };
            let idx = t.targets.len();
            for m in &members {
                used.insert(m.clone());
                if placed.insert(m.clone(), idx).is_some() {
                    t.notes.push(format!(
                        "{m} is placed twice in config {label}: its rows are replayed in each place"
                    ));
                }
            }
            t.targets.push(Target {
                id,
                config: Some(label.to_string()),
                kind,
                node,
                gpu: g.gpu,
                model: model.key.to_string(),
                profile: profile.map(|(n, _)| n),
                memory_bytes: Some(memory),
                slices,
                gpu_slices: model.compute_slices,
                members,
                placeholders,
                item: item.clone(),
            });
        };
        if g.mig_enabled {
            for inst in &g.instances {
                if inst.workloads.is_empty() {
                    continue;
                }
                let Some(p) = model.profile(inst.profile_id) else {
                    continue;
                };
                add(
                    t,
                    "mig",
                    Some((p.name.clone(), inst.placement.start)),
                    p.memory_bytes,
                    p.compute_slices,
                    &inst.workloads,
                );
            }
        } else if !g.workloads.is_empty() {
            add(
                t,
                "gpu",
                None,
                model.memory_total_bytes,
                model.compute_slices,
                &g.workloads,
            );
        }
    }
    Ok(placed)
}

/// Each consolidation move of `plan` as a target of `t` on its host: the host's GPU and its
/// guests' as `gpu` workloads (named `node/GPUi`), the host's full memory and one GPU of compute.
fn consolidation_targets(plan: &TesseraPlan, t: &mut Targets) {
    for (i, m) in plan.consolidation.iter().enumerate() {
        let model = model_of(&m.model);
        let mut members = Vec::new();
        for (k, g) in std::iter::once(&m.host).chain(&m.guests).enumerate() {
            let id = format!("{}/GPU{}", g.node, g.gpu);
            let item = if k == 0 {
                format!("consolidation[{i}].host")
            } else {
                format!("consolidation[{i}].guests[{}]", k - 1)
            };
            t.sources.insert(
                id.clone(),
                WorkloadSource {
                    kind: WorkloadKind::Gpu,
                    node: g.node.clone(),
                    gpu: g.gpu,
                    uuid: g.uuid.clone(),
                    gpu_instance: None,
                    label: g.label.clone(),
                    memory_peak_bytes: None,
                    activity: None,
                    slices_basis: model.map(|m| m.compute_slices),
                },
            );
            t.source_items.insert(id.clone(), item);
            members.push(id);
        }
        let slices = model.map_or(7, |m| m.compute_slices);
        t.targets.push(Target {
            id: format!("consolidation {}/GPU{}", m.host.node, m.host.gpu),
            config: None,
            kind: "shared",
            node: Some(m.host.node.clone()),
            gpu: m.host.gpu,
            model: model.map_or(m.model.clone(), |m| m.key.to_string()),
            profile: None,
            memory_bytes: model.map(|m| m.memory_total_bytes),
            slices,
            gpu_slices: slices,
            members,
            placeholders: Vec::new(),
            item: format!("consolidation[{i}]"),
        });
    }
}

pub fn targets(plan: &TesseraPlan, config: Option<&str>) -> Result<Targets, ReplayError> {
    if plan.kind == MIG_PLAN_KIND {
        return Err(no_workloads(MIG_PLAN_KIND));
    }
    if !plan.configs.is_empty() && plan.workloads.is_empty() {
        return Err(no_workloads(&plan.kind));
    }
    let mut t = Targets::default();
    for (id, w) in &plan.workloads {
        t.sources.insert(id.clone(), w.clone());
        t.source_items.insert(id.clone(), format!("workloads.{id}"));
    }
    configs_in_force(plan, config, &mut t)?;
    let mut used = BTreeSet::new();
    for label in t.configs.clone() {
        let Some(gpus) = plan.configs.get(&label) else {
            continue;
        };
        let placed = place_config(&mut t, &label, gpus, &mut used)?;
        t.placed.insert(label, placed);
    }
    for id in plan.workloads.keys() {
        if !used.contains(id) {
            t.notes.push(format!(
                "{id} is in the workloads section but no replayed config places it: every interval in which it holds memory counts as failed"
            ));
        }
    }
    consolidation_targets(plan, &mut t);
    Ok(t)
}

/// Refuses a plan naming nodes or GPUs the data does not have (every source's, and every
/// target's with a node): the first one found.
pub fn check_in_data(t: &Targets, ex: &Extracted) -> Result<(), ReplayError> {
    match not_in_data(t, ex).into_iter().next() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Every node or GPU the plan names that the data does not have (an out-of-sample replay reports
/// them as not seen instead of refusing: work and GPUs come and go between two periods).
pub fn not_in_data(t: &Targets, ex: &Extracted) -> Vec<ReplayError> {
    let mut out = Vec::new();
    for (id, s) in &t.sources {
        let item = t.source_items.get(id).map_or(id.as_str(), String::as_str);
        if let Err(e) = check_one(ex, item, "the plan", &s.node, s.gpu) {
            out.push(e);
            continue;
        }
        // A plan's UUID guards against renumbered GPUs: the rows at that index must be its.
        if let (Some(want), Some(st)) = (&s.uuid, ex.gpus.get(&(s.node.clone(), s.gpu)))
            && !st.uuids.is_empty()
            && !st.uuids.contains(want)
        {
            out.push(ReplayError::NotInData(format!(
                "{item}: the plan names GPU {} on {} with UUID {want}, but the data has {} there (renumbered or replaced GPUs?): re-plan on this data",
                s.gpu,
                s.node,
                list(st.uuids.iter().cloned().collect())
            )));
        }
    }
    for tg in &t.targets {
        if let Some(n) = &tg.node
            && let Err(e) = check_one(ex, &tg.item, "a target", n, tg.gpu)
        {
            out.push(e);
        }
    }
    out
}

fn list(v: Vec<String>) -> String {
    let n = v.len();
    let mut s = v.into_iter().take(10).collect::<Vec<_>>().join(", ");
    if n > 10 {
        s.push_str(&format!(" and {} more", n - 10));
    }
    s
}

fn check_one(
    ex: &Extracted,
    item: &str,
    what: &str,
    node: &str,
    gpu: u32,
) -> Result<(), ReplayError> {
    if !ex.nodes.contains(node) {
        return Err(ReplayError::NotInData(format!(
            "{item}: {what} names node {node:?}, which is not in the data for this range (nodes: {})",
            list(ex.nodes.iter().cloned().collect())
        )));
    }
    if !ex.gpus.contains_key(&(node.to_string(), gpu)) {
        let there: Vec<String> = ex
            .gpus
            .keys()
            .filter(|(n, _)| n == node)
            .map(|(_, g)| g.to_string())
            .collect();
        return Err(ReplayError::NotInData(format!(
            "{item}: {what} names GPU {gpu} on {node}, which is not in the data for this range (GPUs there: {})",
            list(there)
        )));
    }
    Ok(())
}
