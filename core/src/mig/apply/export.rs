//! Export: the node's current layout as a tessera plan ([`export_plan`]) or an
//! nvidia-mig-parted v1 file ([`export_mig_parted`]).
//!
//! It reads only the given state; it changes nothing.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::{model_of, profile_name};
use crate::mig::control::MigNodeState;
use crate::mig::plan::{GpuLayout, PlannedInstance, TesseraPlan};

/// The node's current layout as a tessera plan with one config, `label`. GPUs whose model
/// tessera does not know are left out (listed in the returned warnings).
pub fn export_plan(state: &MigNodeState, label: &str) -> (TesseraPlan, Vec<String>) {
    let mut warnings = Vec::new();
    let mut layouts = Vec::new();
    for g in &state.gpus {
        let Some(model) = model_of(g) else {
            warnings.push(format!(
                "GPU {} ({}): {} is not a model tessera knows; left out",
                g.index, g.uuid, g.name
            ));
            continue;
        };
        if g.mig_mode.is_some_and(|m| m.current != m.pending) {
            warnings.push(format!(
                "GPU {} ({}): a MIG mode change is pending a GPU reset; exported as it is now",
                g.index, g.uuid
            ));
        }
        let enabled = g.mig_current();
        let mut instances: Vec<PlannedInstance> = Vec::new();
        if enabled {
            for i in &g.instances {
                let Some(p) = model.profile(i.profile_id) else {
                    warnings.push(format!(
                        "GPU {}: profile id {} is not in tessera's table for {}; left out",
                        g.index, i.profile_id, model.key
                    ));
                    continue;
                };
                instances.push(PlannedInstance {
                    profile: p.name.clone(),
                    profile_id: p.id,
                    placement: i.placement,
                    workloads: Vec::new(),
                });
            }
        }
        instances.sort_by_key(|i| i.placement.start);
        layouts.push(GpuLayout {
            node: Some(state.node.clone()),
            gpu: g.index,
            uuid: Some(g.uuid.clone()),
            model: model.key.to_string(),
            mig_enabled: enabled,
            instances,
            workloads: Vec::new(),
        });
    }
    let mut plan = TesseraPlan::new();
    plan.comment = Some(format!(
        "exported by tessera mig export from node {} at {}",
        state.node,
        chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    ));
    plan.configs.insert(label.to_string(), layouts);
    (plan, warnings)
}

/// The node's current layout as an nvidia-mig-parted v1 file with one config, `label` (one
/// entry per GPU; mig-parted has no placements).
pub fn export_mig_parted(state: &MigNodeState, label: &str) -> String {
    let mut out = format!(
        "# exported by tessera mig export from node {} (nvidia-mig-parted v1; no placements)\nversion: v1\nmig-configs:\n  {label}:\n",
        state.node
    );
    for g in state.gpus.iter().filter(|g| g.mig_mode.is_some()) {
        let model = model_of(g);
        let enabled = g.mig_current();
        let _ = writeln!(out, "    - devices: [{}]", g.index);
        let _ = writeln!(out, "      mig-enabled: {enabled}");
        let mut counts: BTreeMap<String, u32> = BTreeMap::new();
        if enabled {
            for i in &g.instances {
                *counts.entry(profile_name(model, i.profile_id)).or_insert(0) += 1;
            }
        }
        if counts.is_empty() {
            out.push_str("      mig-devices: {}\n");
        } else {
            out.push_str("      mig-devices:\n");
            for (name, n) in counts {
                let _ = writeln!(out, "        \"{name}\": {n}");
            }
        }
    }
    out
}
