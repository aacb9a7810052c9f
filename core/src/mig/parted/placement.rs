//! Selection and placement: which entry of a [`PartedConfig`] applies to a GPU
//! ([`PartedConfig::entry_for`]), the check of a plan against the node's inventory
//! ([`PartedConfig::validate`]), and explicit placements of GPU instances on a model ([`place`]).
//!
//! It does not parse files ([`super::format`]) nor compare with the actual layout
//! ([`super::drift`]).

use super::format::{Devices, PartedEntry};
use super::{PartedConfig, PartedError};
use crate::mig::{self, GpuModel, LayoutInstance};
use crate::model::{GpuInfo, Inventory, Placement};

/// Whether `profiles` (ids, with repetition) can be placed together on `model`.
fn fits(model: &GpuModel, profiles: &[u32]) -> Result<(), String> {
    place(model, profiles).map(|_| ())
}

/// Explicit placements for `profiles` (ids, with repetition) on `model`, searched largest first
/// (the order in which they must be created); `Err` says why none exists.
pub fn place(model: &GpuModel, profiles: &[u32]) -> Result<Vec<LayoutInstance>, String> {
    fn search(
        model: &GpuModel,
        rest: &[u32],
        chosen: &mut Vec<LayoutInstance>,
    ) -> Option<Vec<LayoutInstance>> {
        let Some((&id, rest)) = rest.split_first() else {
            return mig::validate_layout(model, chosen)
                .is_ok()
                .then(|| chosen.clone());
        };
        let p = model.profile(id)?;
        for start in &p.placement_starts {
            let placement = Placement {
                start: *start,
                size: p.memory_slices,
            };
            if chosen.iter().any(|c| c.placement.overlaps(&placement)) {
                continue;
            }
            chosen.push(LayoutInstance {
                profile_id: id,
                placement,
            });
            if let Some(found) = search(model, rest, chosen) {
                return Some(found);
            }
            chosen.pop();
        }
        None
    }
    // Quick rule checks first (max counts, +me, compute slices), with a clear message.
    let mut sorted: Vec<u32> = profiles.to_vec();
    for p in &model.profiles {
        let n = sorted.iter().filter(|&&id| id == p.id).count() as u32;
        if n > p.max_count {
            return Err(format!(
                "{n} × {} exceed its maximum of {} per GPU",
                p.name, p.max_count
            ));
        }
    }
    let compute: u32 = sorted
        .iter()
        .filter_map(|id| model.profile(*id))
        .map(|p| p.compute_slices)
        .sum();
    if compute > model.compute_slices {
        return Err(format!(
            "the instances need {compute} compute slices; {} has {}",
            model.key, model.compute_slices
        ));
    }
    // Largest first: fewer dead ends.
    sorted.sort_by_key(|id| std::cmp::Reverse(model.profile(*id).map_or(0, |p| p.memory_slices)));
    match search(model, &sorted, &mut Vec::new()) {
        Some(found) => Ok(found),
        None => Err(format!(
            "no placement of these instances exists on {} (memory slices overlap or a rule is broken)",
            model.key
        )),
    }
}

impl PartedConfig {
    /// The entry that applies to `gpu`, if any. `Err` when entries that select it disagree, or
    /// a device filter cannot be matched.
    pub fn entry_for(&self, gpu: &GpuInfo) -> Result<Option<&PartedEntry>, String> {
        let mut found: Option<(usize, &PartedEntry)> = None;
        for (i, e) in self.entries.iter().enumerate() {
            if !e.selects(gpu)? {
                continue;
            }
            if let Some((j, prev)) = found
                && !prev.same_layout(e)
            {
                return Err(format!(
                    "entries {j} and {i} of config {:?} both select it and ask for different layouts",
                    self.label
                ));
            }
            found = Some((i, e));
        }
        Ok(found.map(|(_, e)| e))
    }

    /// Check the plan against the node's GPUs: every GPU it selects must support what it asks
    /// (MIG, profile names of the GPU's model, instances that fit). Returns warnings for
    /// device indices that name no GPU on this node.
    pub fn validate(&self, inventory: &Inventory) -> Result<Vec<String>, PartedError> {
        let err = |gpu: &GpuInfo, message: String| PartedError::Gpu {
            path: self.source.clone(),
            label: self.label.clone(),
            gpu: gpu.index,
            name: gpu.name.clone(),
            message,
        };
        for gpu in &inventory.gpus {
            let Some(entry) = self.entry_for(gpu).map_err(|m| err(gpu, m))? else {
                continue;
            };
            if !entry.mig_enabled {
                continue;
            }
            let Some(model) = mig::model_by_nvml_name(&gpu.name) else {
                return Err(err(
                    gpu,
                    "tessera has no MIG profile table for this model, so it cannot check a MIG layout on it"
                        .into(),
                ));
            };
            if !model.supports_mig() {
                return Err(err(
                    gpu,
                    format!(
                        "{} does not support MIG, but the config enables it",
                        model.key
                    ),
                ));
            }
            let mut ids = Vec::new();
            for (name, count) in &entry.mig_devices {
                let Some(p) = model.profile_by_name(name) else {
                    return Err(err(
                        gpu,
                        format!(
                            "profile {name:?} does not exist on {}; its profiles are {}",
                            model.key,
                            model
                                .profiles
                                .iter()
                                .map(|p| p.name.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    ));
                };
                if *count > p.max_count {
                    return Err(err(
                        gpu,
                        format!(
                            "{count} × {} exceed its maximum of {} per GPU",
                            p.name, p.max_count
                        ),
                    ));
                }
                ids.extend(std::iter::repeat_n(p.id, *count as usize));
            }
            fits(model, &ids).map_err(|m| err(gpu, m))?;
        }
        let mut warnings = Vec::new();
        for (i, e) in self.entries.iter().enumerate() {
            if let Devices::Indices(v) = &e.devices {
                for d in v {
                    if !inventory.gpus.iter().any(|g| g.index == *d) {
                        warnings.push(format!(
                            "MIG config {}, config {:?}, entry {i}: device {d} does not exist on this node ({} GPUs); ignored",
                            self.source,
                            self.label,
                            inventory.gpus.len()
                        ));
                    }
                }
            }
        }
        Ok(warnings)
    }
}
