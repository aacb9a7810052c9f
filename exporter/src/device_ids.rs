//! The kubelet's names of GPU and MIG devices mapped to NVML UUIDs, the key every series,
//! holder and history record uses (`docs/attribution.md`, "Device ids").
//!
//! [`crate::kubelet`] keeps each device as its allocator named it; this module maps those names
//! with the node's inventory (read on the sampler thread), pure:
//!
//! - `GPU-…` and `MIG-…` UUIDs (the NVIDIA device plugin, which advertises UUIDs to the kubelet
//!   whatever its `--device-id-strategy`: that flag only changes `NVIDIA_VISIBLE_DEVICES` in the
//!   container) are kept;
//! - a bare index `N` is NVML index `N`; `nvidiaN` (device plugins that name `/dev/nvidiaN`, such
//!   as GKE's) is the GPU whose device minor number is `N`;
//! - DRA devices of NVIDIA's DRA driver (`gpu.nvidia.com`, kept as
//!   `dra/gpu.nvidia.com/<pool>/<device>`): `gpu-<minor>` is the GPU with that minor number;
//!   `gpu-<minor>-mig-<profile>-<profile id>-<start>` (driver 25.12 and later) and
//!   `gpu-<minor>-mig-<profile id>-<start>-<size>` (25.8) are the MIG device of that GPU whose
//!   GPU instance has that profile id and placement.
//!
//! What it does not do: guess. A name that matches no device of the inventory (another driver's,
//! `gpu-vfio-N` passthrough, a device gone since) is returned as unmatched, and its holders name
//! no GPU.

use std::collections::BTreeMap;

use tessera_core::model::Inventory;

/// The kubelet's key of a DRA device: `dra/<driver>/<pool>/<device>`.
pub fn dra_key(driver: &str, pool: &str, device: &str) -> String {
    format!("dra/{driver}/{pool}/{device}")
}

/// The NVIDIA DRA driver's name.
pub const NVIDIA_DRA_DRIVER: &str = "gpu.nvidia.com";

fn is_uuid(id: &str) -> bool {
    id.starts_with("GPU-") || id.starts_with("MIG-")
}

/// Whether `id` is a UUID already (nothing to map).
pub fn needs_mapping(id: &str) -> bool {
    !is_uuid(id)
}

fn gpu_by_minor(inv: &Inventory, minor: u32) -> Option<&tessera_core::model::GpuInfo> {
    inv.gpus.iter().find(|g| g.minor_number == Some(minor))
}

/// `gpu-<minor>[-mig-…]` of the NVIDIA DRA driver → the UUID it names.
fn dra_device(inv: &Inventory, name: &str) -> Option<String> {
    let rest = name.strip_prefix("gpu-")?;
    let (minor, mig) = match rest.split_once("-mig-") {
        Some((m, mig)) => (m, Some(mig)),
        None => (rest, None),
    };
    let gpu = gpu_by_minor(inv, minor.parse().ok()?)?;
    let Some(mig) = mig else {
        return Some(gpu.uuid.clone());
    };
    let parts: Vec<&str> = mig.split('-').collect();
    let [a, b, c] = parts[..] else {
        return None;
    };
    // 25.8: <profile id>-<start>-<size>; later: <profile name>-<profile id>-<start>.
    let (profile_id, start, size) = match a.parse::<u32>() {
        Ok(id) => (id, b.parse::<u32>().ok()?, Some(c.parse::<u32>().ok()?)),
        Err(_) => (b.parse::<u32>().ok()?, c.parse::<u32>().ok()?, None),
    };
    gpu.mig_instances
        .iter()
        .find(|m| {
            m.profile_id == profile_id
                && m.placement.start == start
                && size.is_none_or(|s| m.placement.size == s)
        })
        .map(|m| m.uuid.clone())
}

/// The UUID that `id` (a key of [`crate::kubelet::DeviceHolders`]) names on this node, if any.
pub fn uuid_of(inv: &Inventory, id: &str) -> Option<String> {
    if is_uuid(id) {
        return Some(id.to_string());
    }
    if let Some(rest) = id.strip_prefix("dra/") {
        let (driver, rest) = rest.split_once('/')?;
        let (_pool, device) = rest.split_once('/')?;
        return (driver == NVIDIA_DRA_DRIVER)
            .then(|| dra_device(inv, device))
            .flatten();
    }
    if let Some(n) = id.strip_prefix("nvidia") {
        return gpu_by_minor(inv, n.parse().ok()?).map(|g| g.uuid.clone());
    }
    let index: u32 = id.parse().ok()?;
    inv.gpus
        .iter()
        .find(|g| g.index == index)
        .map(|g| g.uuid.clone())
}

/// Each id of `ids` mapped to its UUID: (id → UUID, ids that match no device).
pub fn map_ids<'a>(
    inv: &Inventory,
    ids: impl IntoIterator<Item = &'a str>,
) -> (BTreeMap<String, String>, Vec<String>) {
    let mut mapped = BTreeMap::new();
    let mut unmatched = Vec::new();
    for id in ids {
        match uuid_of(inv, id) {
            Some(u) => {
                mapped.insert(id.to_string(), u);
            }
            None => unmatched.push(id.to_string()),
        }
    }
    (mapped, unmatched)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_core::model::{GpuInfo, MigInstanceInfo, Placement};

    fn mig(gi: u32, profile_id: u32, name: &str, start: u32, size: u32) -> MigInstanceInfo {
        MigInstanceInfo {
            gpu_instance_id: gi,
            compute_instance_id: 0,
            profile_id,
            profile_name: name.into(),
            placement: Placement { start, size },
            uuid: format!("MIG-{gi}"),
            memory_total_bytes: None,
        }
    }

    /// Two GPUs whose minor numbers are not their indices; GPU 1 in MIG mode.
    fn inventory() -> Inventory {
        let gpu = |index: u32, minor: u32, migs: Vec<MigInstanceInfo>| GpuInfo {
            index,
            minor_number: Some(minor),
            uuid: format!("GPU-{index}"),
            name: "NVIDIA H100 80GB HBM3".into(),
            pci_bus_id: String::new(),
            memory_total_bytes: None,
            power_limit_watts: None,
            mig_mode: None,
            mig_instances: migs,
        };
        Inventory {
            node: "n".into(),
            driver_version: None,
            cuda_version: None,
            gpus: vec![
                gpu(0, 3, vec![]),
                gpu(
                    1,
                    0,
                    vec![mig(1, 19, "1g.10gb", 0, 1), mig(2, 9, "3g.40gb", 4, 4)],
                ),
            ],
        }
    }

    #[test]
    fn dra_names_map_by_minor_number_and_mig_placement() {
        let inv = inventory();
        let dra = |d: &str| uuid_of(&inv, &dra_key(NVIDIA_DRA_DRIVER, "node-1", d));
        assert_eq!(
            dra("gpu-3").as_deref(),
            Some("GPU-0"),
            "by minor, not index"
        );
        assert_eq!(dra("gpu-0").as_deref(), Some("GPU-1"));
        assert_eq!(dra("gpu-0-mig-1g10gb-19-0").as_deref(), Some("MIG-1"));
        assert_eq!(dra("gpu-0-mig-3g40gb-9-4").as_deref(), Some("MIG-2"));
        // The 25.8 form: profile id, start, size.
        assert_eq!(dra("gpu-0-mig-9-4-4").as_deref(), Some("MIG-2"));
        assert_eq!(dra("gpu-0-mig-9-4-2"), None, "size differs");
        assert_eq!(dra("gpu-0-mig-1g10gb-19-1"), None, "no instance there");
        assert_eq!(dra("gpu-7"), None, "no such minor");
        assert_eq!(dra("gpu-vfio-0"), None);
        assert_eq!(
            uuid_of(
                &inv,
                &dra_key("compute-domain.nvidia.com", "n", "channel-0")
            ),
            None
        );
    }

    #[test]
    fn uuids_indices_and_device_nodes_map_and_the_rest_is_unmatched() {
        let inv = inventory();
        let (mapped, unmatched) = map_ids(
            &inv,
            [
                "GPU-9", "MIG-abc", "1", "nvidia3", "7", "nvidiaX", "0:1", "",
            ],
        );
        assert_eq!(mapped["GPU-9"], "GPU-9", "a UUID is kept as it is");
        assert_eq!(mapped["MIG-abc"], "MIG-abc");
        assert_eq!(mapped["1"], "GPU-1", "NVML index");
        assert_eq!(mapped["nvidia3"], "GPU-0", "/dev/nvidia3 is minor 3");
        assert_eq!(unmatched, ["7", "nvidiaX", "0:1", ""]);
    }
}
