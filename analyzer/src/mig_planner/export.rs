//! Turns plans into files: a config of the tessera plan format
//! (`tessera_core::mig::plan`, tessera-mig-plan v1, with placements and workloads) and the same
//! layouts as an nvidia-mig-parted v1 config (profile counts only; mig-parted has no placements).
//!
//! mig-parted configs are per node (`nvidia-mig-parted apply -c LABEL` runs on one node and
//! selects GPUs by index), so with GPUs on several nodes every (config, node) pair gets its own
//! label `CONFIG-NODE` (e.g. `day-gpu-node-1`); with one node the label is the config's. GPUs of
//! a node with equal layouts share one entry (`devices: [0, 2]`). A GPU the plan leaves empty is
//! written with `mig-enabled: false` (free as a whole GPU), and so is a GPU the plan gives whole to
//! one workload ([`super::PlannedGpu::mig_enabled`] false: MIG off, the workload named on the GPU).
//!
//! Pure: builds values and text; the caller writes files.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use tessera_core::mig::plan::{GpuLayout, PlannedInstance};

use super::{FleetGpu, Proposal, Workload};

/// The plan's GPUs as one config of a tessera plan file: used GPUs with their instances and
/// workloads (a whole-GPU one with MIG off and its workload on the GPU), then the MIG-capable GPUs
/// it leaves free (`mig-enabled: false`).
pub fn config(plan: &Proposal, workloads: &[Workload]) -> Vec<GpuLayout> {
    let ids =
        |ws: &[usize]| -> Vec<String> { ws.iter().map(|&w| workloads[w].id.clone()).collect() };
    let mut out: Vec<GpuLayout> = plan
        .gpus
        .iter()
        .map(|g| {
            let (instances, whole) = if g.mig_enabled {
                let instances = g
                    .instances
                    .iter()
                    .map(|i| PlannedInstance {
                        profile: i.profile.clone(),
                        profile_id: i.profile_id,
                        placement: i.placement,
                        workloads: ids(&i.workloads),
                    })
                    .collect();
                (instances, Vec::new())
            } else {
                let ws: Vec<usize> = g
                    .instances
                    .iter()
                    .flat_map(|i| i.workloads.clone())
                    .collect();
                (Vec::new(), ids(&ws))
            };
            GpuLayout {
                node: Some(g.gpu.node.clone()),
                gpu: g.gpu.index,
                uuid: g.gpu.uuid.clone(),
                model: g.model.to_string(),
                mig_enabled: g.mig_enabled,
                instances,
                workloads: whole,
            }
        })
        .collect();
    out.extend(plan.free_gpus.iter().filter_map(free_layout));
    out.sort_by(|a, b| (&a.node, a.gpu).cmp(&(&b.node, b.gpu)));
    out
}

/// A fleet GPU left free: MIG disabled.
pub fn free_layout(g: &FleetGpu) -> Option<GpuLayout> {
    let model = g.mig_model()?;
    Some(GpuLayout {
        node: Some(g.node.clone()),
        gpu: g.index,
        uuid: g.uuid.clone(),
        model: model.key.to_string(),
        mig_enabled: false,
        instances: Vec::new(),
        workloads: Vec::new(),
    })
}

/// The mig-parted label of a config on a node.
pub fn mig_parted_label(config: &str, node: Option<&str>, several_nodes: bool) -> String {
    match node {
        Some(n) if several_nodes => format!("{config}-{n}"),
        _ => config.to_string(),
    }
}

/// Per-GPU profile counts of a layout, by profile name.
pub fn profile_counts(g: &GpuLayout) -> BTreeMap<String, u32> {
    let mut m = BTreeMap::new();
    for i in &g.instances {
        *m.entry(i.profile.clone()).or_insert(0) += 1;
    }
    m
}

/// All configs of a tessera plan as one nvidia-mig-parted v1 file (see the module doc for the
/// label and grouping rules).
pub fn mig_parted(configs: &BTreeMap<String, Vec<GpuLayout>>) -> String {
    let nodes: std::collections::BTreeSet<Option<&str>> = configs
        .values()
        .flatten()
        .map(|g| g.node.as_deref())
        .collect();
    let several = nodes.len() > 1;
    let mut s = String::from(
        "# nvidia-mig-parted v1 config written by `tessera mig plan` (no placements: mig-parted picks them)\nversion: v1\nmig-configs:\n",
    );
    for (label, gpus) in configs {
        // node -> (enabled, counts) -> indices
        type Key = (bool, BTreeMap<String, u32>);
        let mut per_node: BTreeMap<Option<&str>, Vec<(Key, Vec<u32>)>> = BTreeMap::new();
        for g in gpus {
            let key = (g.mig_enabled, profile_counts(g));
            let groups = per_node.entry(g.node.as_deref()).or_default();
            match groups.iter_mut().find(|(k, _)| *k == key) {
                Some((_, idx)) => idx.push(g.gpu),
                None => groups.push((key, vec![g.gpu])),
            }
        }
        for (node, groups) in per_node {
            let name = mig_parted_label(label, node, several);
            let _ = writeln!(s, "  {}:", quote(&name));
            for ((enabled, counts), mut idx) in groups {
                idx.sort_unstable();
                let list: Vec<String> = idx.iter().map(u32::to_string).collect();
                let _ = writeln!(s, "    - devices: [{}]", list.join(", "));
                let _ = writeln!(s, "      mig-enabled: {enabled}");
                if counts.is_empty() {
                    let _ = writeln!(s, "      mig-devices: {{}}");
                } else {
                    let _ = writeln!(s, "      mig-devices:");
                    for (p, n) in counts {
                        let _ = writeln!(s, "        {}: {n}", quote(&p));
                    }
                }
            }
        }
    }
    s
}

/// A YAML double-quoted scalar (JSON string syntax is valid YAML).
fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("\"{s}\""))
}
