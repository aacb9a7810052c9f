//! Drift (`tessera_mig_layout_drift`): how each GPU a [`PartedConfig`] selects compares with it,
//! in MIG mode and GPU instances per profile ([`PartedConfig::drift`], [`GpuDrift`]).
//!
//! It does not check that a plan fits a GPU ([`super::placement`]); placements are not compared.

use std::collections::BTreeMap;

use super::PartedConfig;
use crate::model::{GpuInfo, Inventory};

/// How one GPU compares with the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuDrift {
    pub index: u32,
    pub uuid: String,
    /// Whether MIG mode or the GPU instances per profile differ from the plan.
    pub drifted: bool,
    /// GPU instances to create or destroy to match the plan (sum over profiles of the
    /// difference in count; a MIG mode that differs counts every instance of the side that has
    /// them).
    pub differing_instances: u32,
}

/// The GPU's current GPU instances per profile name (one per GPU instance, whatever its compute
/// instances).
fn actual_counts(gpu: &GpuInfo) -> BTreeMap<String, u32> {
    let mut seen = std::collections::BTreeSet::new();
    let mut out = BTreeMap::new();
    for m in &gpu.mig_instances {
        if seen.insert(m.gpu_instance_id) {
            *out.entry(m.profile_name.clone()).or_insert(0) += 1;
        }
    }
    out
}

impl PartedConfig {
    /// Compare every GPU the plan selects with it. GPUs without a plan, or that cannot be
    /// matched (unknown model with a device filter, conflicting entries, unreadable identity),
    /// are left out: no series rather than a guess.
    pub fn drift(&self, inventory: &Inventory) -> Vec<GpuDrift> {
        let mut out = Vec::new();
        for gpu in &inventory.gpus {
            if gpu.name.is_empty() {
                continue;
            }
            let Ok(Some(entry)) = self.entry_for(gpu) else {
                continue;
            };
            let enabled = gpu.mig_mode.is_some_and(|m| m.current);
            let actual = actual_counts(gpu);
            let differing = match (entry.mig_enabled, enabled) {
                (true, true) => {
                    let mut names: std::collections::BTreeSet<&String> =
                        entry.mig_devices.keys().collect();
                    names.extend(actual.keys());
                    names
                        .into_iter()
                        .map(|n| {
                            let want = entry.mig_devices.get(n).copied().unwrap_or(0);
                            let have = actual.get(n).copied().unwrap_or(0);
                            want.abs_diff(have)
                        })
                        .sum()
                }
                (true, false) => entry.mig_devices.values().sum(),
                (false, true) => actual.values().sum(),
                (false, false) => 0,
            };
            out.push(GpuDrift {
                index: gpu.index,
                uuid: gpu.uuid.clone(),
                drifted: entry.mig_enabled != enabled || differing > 0,
                differing_instances: differing,
            });
        }
        out
    }
}
