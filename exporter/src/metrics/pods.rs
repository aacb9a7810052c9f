//! Which containers hold each GPU and MIG device, from the kubelet's pod-resources API
//! (`--kubelet.pod-resources-socket`): `tessera_gpu_pod_info`, one series per (device, holder),
//! also for devices that several containers share (time-slicing), whose other series carry no
//! pod labels; and `tessera_gpu_pod_unused_seconds` with the same labels, how long each holder
//! has held its device unused (kept by [`crate::idle::UnusedTracker`] on the sampler thread; no
//! series where the device's use is unknown). No series without the kubelet, and none for
//! device ids that are not a GPU or MIG UUID of the snapshot's inventory.
//!
//! Labels: `gpu`, `uuid` (of the GPU), `gpu_instance` and `compute_instance` (empty for a whole
//! GPU), `device` (the id the kubelet reports: the GPU's or the MIG instance's UUID), `resource`
//! (`nvidia.com/gpu`, `nvidia.com/mig-1g.10gb`, ...), `pod`, `namespace`, `container`.

use std::fmt;

use prometheus_client::encoding::DescriptorEncoder;

use super::catalog as c;
use super::{Collector, Context, gauge};

/// The kubelet's device holders.
pub struct PodsCollector;

impl Collector for PodsCollector {
    fn name(&self) -> &'static str {
        "pods"
    }

    fn collect(&self, ctx: &Context<'_>, enc: &mut DescriptorEncoder<'_>) -> fmt::Result {
        let holders = &ctx.snapshot.holders;
        let Some(inventory) = ctx.snapshot.inventory.as_deref() else {
            return Ok(());
        };
        if holders.is_empty() {
            return Ok(());
        }
        // (gpu, uuid, gpu_instance, compute_instance, device) of every device in the inventory.
        let mut devices: Vec<[String; 5]> = Vec::new();
        for g in &inventory.gpus {
            let gpu = g.index.to_string();
            devices.push([
                gpu.clone(),
                g.uuid.clone(),
                "".into(),
                "".into(),
                g.uuid.clone(),
            ]);
            for m in &g.mig_instances {
                devices.push([
                    gpu.clone(),
                    g.uuid.clone(),
                    m.gpu_instance_id.to_string(),
                    m.compute_instance_id.to_string(),
                    m.uuid.clone(),
                ]);
            }
        }
        let unused = &ctx.snapshot.idle.held_unused;
        let mut info = Vec::new();
        let mut unused_series = Vec::new();
        for d in &devices {
            for h in holders.holders(&d[4]) {
                let labels = [
                    ("gpu", d[0].as_str()),
                    ("uuid", d[1].as_str()),
                    ("gpu_instance", d[2].as_str()),
                    ("compute_instance", d[3].as_str()),
                    ("device", d[4].as_str()),
                    ("resource", h.resource.as_str()),
                    ("pod", h.pod.as_str()),
                    ("namespace", h.namespace.as_str()),
                    ("container", h.container.as_str()),
                ];
                info.push((labels, 1i64));
                if let Some(secs) = unused.get(&(d[4].clone(), h.clone())) {
                    unused_series.push((labels, *secs));
                }
            }
        }
        gauge(enc, &c::GPU_POD_INFO, info)?;
        gauge(enc, &c::GPU_POD_UNUSED, unused_series)
    }
}
