//! A job's energy: its processes' part of each GPU interval's energy ([`crate::energy`]: by
//! share of activity, idle kept apart), per device. Every process of a GPU takes part in the
//! split, the job's and others', so a job's share does not depend on what else was read.
//! Reads the partition's frames; pure otherwise.

use std::collections::BTreeMap;

use super::{Device, JobError};
use crate::energy::contributions;
use crate::frames::Frames;

/// The joules of each job's processes (`only`: one job's) on each device, over the GPU intervals
/// with `ts` in `(range.0, range.1]` whose energy is known; a device with none is absent.
pub(super) fn job_energy(
    frames: &Frames,
    only: Option<&str>,
    range: (i64, i64),
) -> Result<BTreeMap<String, BTreeMap<Device, f64>>, JobError> {
    let c = contributions(frames, range, crate::energy::Held::Lazy, |p| {
        let job = p.slurm_job.filter(|j| only.is_none_or(|o| o == *j))?;
        Some((
            job.to_string(),
            Device {
                node: p.node?.to_string(),
                gpu: u32::try_from(p.gpu?).ok()?,
                uuid: p.uuid.map(str::to_string),
                gpu_instance: p.gpu_instance.and_then(|g| u32::try_from(g).ok()),
            },
        ))
    })?;
    let mut out: BTreeMap<String, BTreeMap<Device, f64>> = BTreeMap::new();
    for (k, j) in c.shares {
        let (job, device) = &c.keys[k];
        *out.entry(job.clone())
            .or_default()
            .entry(device.clone())
            .or_default() += j;
    }
    Ok(out)
}
