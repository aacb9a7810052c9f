//! [`ProfileReader`] for [`NvmlBackend`]: each GPU's GPU-instance profile table
//! (`nvmlDeviceGetGpuInstanceProfileInfo` per index), the profile's name
//! (`nvmlDeviceGetGpuInstanceProfileInfoV`, absent on drivers without it) and its possible
//! placements (`nvmlDeviceGetGpuInstancePossiblePlacements_v2`). Read-only; comparing with the
//! built-in tables is `mig::profile_compare`'s job.

use super::NvmlBackend;
use crate::device::GpuBackend;
use crate::mig::profile_compare::ReportedProfile;
use crate::mig::profile_reader::{GpuProfileTable, ProfileReadError, ProfileReader};

impl ProfileReader for NvmlBackend {
    fn backend_name(&self) -> &'static str {
        "nvml"
    }

    fn profile_tables(&mut self) -> Result<Vec<GpuProfileTable>, ProfileReadError> {
        let inventory = self.inventory().map_err(ProfileReadError::Inventory)?;
        let mut tables = Vec::new();
        for gpu in &inventory.gpus {
            let fail = |what: String| {
                let (gpu, name) = (gpu.index, gpu.name.clone());
                move |source| ProfileReadError::Read {
                    gpu,
                    name,
                    what,
                    source,
                }
            };
            let rows = self
                .profile_table(gpu.index)
                .map_err(fail("reading the MIG profile table".into()))?;
            let mut profiles = Vec::new();
            for row in rows {
                let placements =
                    self.possible_placements(gpu.index, row.id)
                        .map_err(fail(format!(
                            "reading the possible placements of profile id {} \
                         (nvmlDeviceGetGpuInstancePossiblePlacements_v2); the placements cannot \
                         be checked without it",
                            row.id
                        )))?;
                // The v1 info has no name; drivers without the V call give none.
                let name = self
                    .profile_name(gpu.index, row.index)
                    .map_err(fail(format!(
                        "reading the name of profile index {}",
                        row.index
                    )))?;
                profiles.push(ReportedProfile {
                    id: row.id,
                    index: row.index,
                    name,
                    compute_slices: row.slice_count,
                    memory_slices: ReportedProfile::memory_slices_of(&placements),
                    memory_mib: row.memory_size_mb,
                    max_count: row.instance_count,
                    placements,
                });
            }
            tables.push(GpuProfileTable {
                gpu: gpu.index,
                name: gpu.name.clone(),
                profiles,
            });
        }
        Ok(tables)
    }
}
