//! The inventory of one GPU ([`gpu_info`]): identity, power limit, MIG mode and MIG instances
//! (GPU/compute instance id, profile id and name, placement). A failed read is logged and the
//! value left out ([`inv`]); it never fails the inventory.
//!
//! It does not sample values over time ([`super::sample`]).

use std::collections::BTreeSet;

use nvml_wrapper::Device;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper_sys::bindings::NVML_DEVICE_MIG_ENABLE;

use super::errors::note_missing;
use super::{GpuState, raw, trace};
use crate::mig;
use crate::model::{GpuInfo, MigInstanceInfo, MigMode, Placement};

/// Profile id, name and placement of a GPU instance.
fn mig_profile(
    parent: &Device<'_>,
    parent_name: &str,
    gi: u32,
) -> Result<(u32, String, Placement), NvmlError> {
    let (profile_id, placement) = trace::call_json(
        "nvmlGpuInstanceGetInfo",
        Some(&format!("gpu_instance={gi}")),
        || raw::gpu_instance_info(parent, gi),
        |(id, p)| serde_json::json!({"profile_id": id, "placement": p}),
    )?;
    let name = mig::model_by_nvml_name(parent_name)
        .and_then(|m| m.profile(profile_id))
        .map(|p| p.name.clone())
        .unwrap_or_else(|| format!("profile-{profile_id}"));
    Ok((profile_id, name, placement))
}

/// Log a failed inventory read and turn it into `None` (NotSupported and missing symbols are
/// expected and not logged as failures).
pub(super) fn inv<T>(
    what: &str,
    index: u32,
    r: Result<T, NvmlError>,
    missing: &mut BTreeSet<String>,
) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(NvmlError::NotSupported) => None,
        Err(NvmlError::FailedToLoadSymbol(detail)) => {
            note_missing(missing, &detail);
            None
        }
        Err(e) => {
            log::warn!("GPU {index}: reading {what} failed: {e}");
            None
        }
    }
}

pub(super) fn gpu_info(
    index: u32,
    dev: &Device<'_>,
    state: &mut GpuState,
    missing: &mut BTreeSet<String>,
) -> GpuInfo {
    if let Some(u) = inv(
        "uuid",
        index,
        trace::call("nvmlDeviceGetUUID", None, || dev.uuid()),
        missing,
    ) {
        state.uuid = Some(u);
    }
    let name = inv(
        "name",
        index,
        trace::call("nvmlDeviceGetName", None, || dev.name()),
        missing,
    )
    .unwrap_or_default();
    let pci_bus_id = inv(
        "PCI info",
        index,
        trace::call("nvmlDeviceGetPciInfo_v3", None, || dev.pci_info()),
        missing,
    )
    .map(|p| p.bus_id)
    .unwrap_or_default();
    let memory_total_bytes = inv(
        "memory",
        index,
        trace::call("nvmlDeviceGetMemoryInfo_v2", None, || dev.memory_info()),
        missing,
    )
    .map(|m| m.total);
    let power_limit_watts = inv(
        "power limit",
        index,
        trace::call("nvmlDeviceGetEnforcedPowerLimit", None, || {
            dev.enforced_power_limit()
        }),
        missing,
    )
    .map(|mw| mw as f64 / 1000.0);
    let mig_mode = inv(
        "MIG mode",
        index,
        trace::call_json(
            "nvmlDeviceGetMigMode",
            None,
            || dev.mig_mode(),
            |m| serde_json::json!({"current": m.current, "pending": m.pending}),
        ),
        missing,
    )
    .map(|m| MigMode {
        current: m.current == NVML_DEVICE_MIG_ENABLE,
        pending: m.pending == NVML_DEVICE_MIG_ENABLE,
    });
    let mig_instances = if mig_mode.is_some_and(|m| m.current) {
        read_mig_instances(index, dev, &name, missing)
    } else {
        Vec::new()
    };
    let minor_number = inv(
        "minor number",
        index,
        trace::call("nvmlDeviceGetMinorNumber", None, || dev.minor_number()),
        missing,
    );
    GpuInfo {
        index,
        minor_number,
        uuid: state.uuid.clone().unwrap_or_default(),
        name,
        pci_bus_id,
        memory_total_bytes,
        power_limit_watts,
        mig_mode,
        mig_instances,
    }
}

/// The MIG instances of a GPU with MIG enabled: every index below the *maximum* MIG device
/// count, empty slots and instances whose reads fail left out, by GPU and compute instance id.
fn read_mig_instances(
    index: u32,
    dev: &Device<'_>,
    name: &str,
    missing: &mut BTreeSet<String>,
) -> Vec<MigInstanceInfo> {
    let mut mig_instances = Vec::new();
    let max = inv(
        "MIG device count",
        index,
        trace::call("nvmlDeviceGetMaxMigDeviceCount", None, || {
            dev.mig_device_count()
        }),
        missing,
    )
    .unwrap_or(0);
    for idx in 0..max {
        mig_instances.extend(read_mig_instance(index, dev, name, idx, missing));
    }
    trace::set_gpu(Some(index), None);
    mig_instances.sort_by_key(|m| (m.gpu_instance_id, m.compute_instance_id));
    mig_instances
}

/// The MIG device at `idx` of GPU `index` (named `name`): its instance ids, profile and
/// placement, UUID and memory; `None` for an empty slot or a failed read of its ids or profile.
fn read_mig_instance(
    index: u32,
    dev: &Device<'_>,
    name: &str,
    idx: u32,
    missing: &mut BTreeSet<String>,
) -> Option<MigInstanceInfo> {
    trace::set_gpu(Some(index), Some(idx));
    let mig_dev = match trace::call_opaque(
        "nvmlDeviceGetMigDeviceHandleByIndex",
        Some(&idx.to_string()),
        || dev.mig_device_by_index(idx),
    ) {
        Err(NvmlError::NotFound) => return None,
        r => inv("MIG device handle", index, r, missing)?,
    };
    let gi = inv(
        "GPU instance id",
        index,
        trace::call("nvmlDeviceGetGpuInstanceId", None, || {
            raw::gpu_instance_id(&mig_dev)
        }),
        missing,
    )?;
    let ci = inv(
        "compute instance id",
        index,
        trace::call("nvmlDeviceGetComputeInstanceId", None, || {
            raw::compute_instance_id(&mig_dev)
        }),
        missing,
    )?;
    let Some((profile_id, profile_name, placement)) = inv(
        "GPU instance info",
        index,
        {
            // Read on the physical GPU, not on the MIG device.
            trace::set_gpu(Some(index), None);
            let r = mig_profile(dev, name, gi);
            trace::set_gpu(Some(index), Some(idx));
            r
        },
        missing,
    ) else {
        log::warn!(
            "GPU {index}: MIG GPU instance {gi} left out of the inventory (no profile/placement)"
        );
        return None;
    };
    Some(MigInstanceInfo {
        gpu_instance_id: gi,
        compute_instance_id: ci,
        profile_id,
        profile_name,
        placement,
        uuid: inv(
            "MIG uuid",
            index,
            trace::call("nvmlDeviceGetUUID", None, || mig_dev.uuid()),
            missing,
        )
        .unwrap_or_default(),
        memory_total_bytes: inv(
            "MIG memory",
            index,
            trace::call("nvmlDeviceGetMemoryInfo_v2", None, || mig_dev.memory_info()),
            missing,
        )
        .map(|m| m.total),
    })
}
