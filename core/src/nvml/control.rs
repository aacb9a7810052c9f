//! [`MigControl`] for [`NvmlBackend`]: the MIG write side over raw NVML calls ([`super::raw`]).
//!
//! nvml-wrapper 0.13 does not wrap GPU/compute instance create, destroy or list, nor
//! `nvmlDeviceSetMigMode`: every such call goes through the function table with `nvml_sym`, so a
//! symbol missing from the loaded library is [`crate::device::DeviceError::MissingSymbol`], never a panic. NVML
//! return codes map onto [`ControlError`]: `IN_USE` → `InUse` (with the processes NVML lists on
//! that GPU instance), `INSUFFICIENT_RESOURCES` → `InsufficientResources`, `NO_PERMISSION` →
//! `NoPermission` (MIG changes need root), `NOT_FOUND` → `NotFound`, `INVALID_ARGUMENT` →
//! `Invalid`.
//!
//! What it does not do: reset a GPU (NVML cannot; tessera never runs `nvidia-smi -r`), create
//! compute instances smaller than their GPU instance, or read process owners (pods and jobs come
//! from `/proc` attribution in the exporter; here processes carry pid and name only).

use nvml_wrapper::error::NvmlError;
use nvml_wrapper_sys::bindings::NVML_DEVICE_MIG_ENABLE;

use super::{NvmlBackend, PROCESS_NAME_LEN, call_error, raw};
use crate::mig;
use crate::mig::control::{
    Activation, ControlError, GpuInstanceState, GpuMigState, MigControl, MigNodeState,
    RunningProcess,
};
use crate::model::{MigMode, Placement};

/// NVML_ERROR_INSUFFICIENT_RESOURCES (not a named variant in nvml-wrapper 0.13).
const INSUFFICIENT_RESOURCES: u32 = 23;

fn control_error(gpu: u32, call: &str, what: String, e: NvmlError) -> ControlError {
    match e {
        NvmlError::InUse => ControlError::InUse {
            gpu,
            what,
            processes: Vec::new(),
        },
        NvmlError::UnexpectedVariant(INSUFFICIENT_RESOURCES) => {
            ControlError::InsufficientResources {
                gpu,
                what,
                reason: format!("{call} returned NVML_ERROR_INSUFFICIENT_RESOURCES"),
            }
        }
        NvmlError::NoPermission => ControlError::NoPermission { call: call.into() },
        NvmlError::NotFound => ControlError::NotFound { gpu, what },
        NvmlError::InvalidArg => ControlError::Invalid {
            gpu,
            what,
            reason: format!("{call} returned NVML_ERROR_INVALID_ARGUMENT"),
        },
        e => ControlError::Device(call_error(call, e)),
    }
}

impl NvmlBackend {
    fn gpu_state(&self, index: u32) -> Result<GpuMigState, ControlError> {
        let dev = self.device(index)?;
        let read = |call: &str, e: NvmlError| ControlError::Device(call_error(call, e));
        let uuid = dev.uuid().map_err(|e| read("nvmlDeviceGetUUID", e))?;
        let name = dev.name().map_err(|e| read("nvmlDeviceGetName", e))?;
        let model = mig::model_by_nvml_name(&name);
        let mig_mode = match dev.mig_mode() {
            Ok(m) => Some(MigMode {
                current: m.current == NVML_DEVICE_MIG_ENABLE,
                pending: m.pending == NVML_DEVICE_MIG_ENABLE,
            }),
            Err(NvmlError::NotSupported) => None,
            Err(e) => return Err(read("nvmlDeviceGetMigMode", e)),
        };
        let mut instances = Vec::new();
        if mig_mode.is_some_and(|m| m.current) {
            let nvml = self.nvml();
            for p in self.profile_table(index)? {
                let gis = match raw::gpu_instances(&dev, p.id) {
                    Ok(l) => l,
                    Err(NvmlError::NotSupported | NvmlError::NotFound) => continue,
                    Err(e) => return Err(read("nvmlDeviceGetGpuInstances", e)),
                };
                for gi in gis {
                    let (id, profile_id, placement) =
                        raw::gi_info(nvml, gi).map_err(|e| read("nvmlGpuInstanceGetInfo", e))?;
                    let compute_instances = raw::compute_instance_ids(nvml, gi)
                        .map_err(|e| read("nvmlGpuInstanceGetComputeInstances", e))?;
                    instances.push(GpuInstanceState {
                        gpu_instance_id: id,
                        profile_id,
                        placement,
                        compute_instances,
                        processes: Vec::new(),
                    });
                }
            }
        }
        instances.sort_by_key(|i| i.placement.start);
        let mut processes = Vec::new();
        let procs = dev
            .running_compute_processes()
            .map_err(|e| read("nvmlDeviceGetComputeRunningProcesses_v3", e))?;
        for p in procs {
            let proc = RunningProcess {
                pid: p.pid,
                name: self.nvml().sys_process_name(p.pid, PROCESS_NAME_LEN).ok(),
                owner: None,
            };
            match p
                .gpu_instance_id
                .and_then(|gi| instances.iter_mut().find(|i| i.gpu_instance_id == gi))
            {
                Some(i) => i.processes.push(proc),
                None => processes.push(proc),
            }
        }
        Ok(GpuMigState {
            index,
            uuid,
            name,
            model: model.map(|m| m.key.to_string()),
            mig_mode,
            instances,
            processes,
        })
    }

    fn compute_slices(&self, gpu: u32, gpu_instance: u32) -> Result<u32, ControlError> {
        let dev = self.device(gpu)?;
        let (_, profile_id, _) = raw::gi_info(
            self.nvml(),
            raw::gi_by_id(&dev, gpu_instance).map_err(|e| {
                control_error(
                    gpu,
                    "nvmlDeviceGetGpuInstanceById",
                    format!("GPU instance {gpu_instance}"),
                    e,
                )
            })?,
        )
        .map_err(|e| ControlError::Device(call_error("nvmlGpuInstanceGetInfo", e)))?;
        let table = self.profile_table(gpu)?;
        table
            .iter()
            .find(|p| p.id == profile_id)
            .map(|p| p.slice_count)
            .ok_or(ControlError::NotFound {
                gpu,
                what: format!("GPU instance profile {profile_id}"),
            })
    }
}

impl MigControl for NvmlBackend {
    fn backend_name(&self) -> &'static str {
        "nvml"
    }

    fn read_state(&mut self) -> Result<MigNodeState, ControlError> {
        let count = self
            .nvml()
            .device_count()
            .map_err(|e| ControlError::Device(call_error("nvmlDeviceGetCount_v2", e)))?;
        let mut gpus = Vec::new();
        for i in 0..count {
            gpus.push(self.gpu_state(i)?);
        }
        Ok(MigNodeState {
            node: self.node.clone(),
            gpus,
        })
    }

    fn set_mig_mode(&mut self, gpu: u32, enabled: bool) -> Result<Activation, ControlError> {
        let dev = self.device(gpu)?;
        let what = || "the GPU (MIG mode)".to_string();
        match raw::set_mig_mode(&dev, enabled) {
            Ok(Ok(())) => {}
            Ok(Err(NvmlError::ResetRequired)) => return Ok(Activation::PendingReset),
            Ok(Err(e)) | Err(e) => {
                return Err(control_error(gpu, "nvmlDeviceSetMigMode", what(), e));
            }
        }
        // Ampere keeps the new mode pending until a reset even when the call succeeds.
        match dev.mig_mode() {
            Ok(m) if (m.current == NVML_DEVICE_MIG_ENABLE) != enabled => {
                Ok(Activation::PendingReset)
            }
            Ok(_) => Ok(Activation::Done),
            Err(e) => Err(ControlError::Device(call_error("nvmlDeviceGetMigMode", e))),
        }
    }

    fn create_gpu_instance(
        &mut self,
        gpu: u32,
        profile_id: u32,
        placement: Placement,
    ) -> Result<u32, ControlError> {
        let dev = self.device(gpu)?;
        raw::create_gpu_instance(&dev, profile_id, placement).map_err(|e| {
            control_error(
                gpu,
                "nvmlDeviceCreateGpuInstanceWithPlacement",
                format!(
                    "profile {profile_id} at {{start: {}, size: {}}}",
                    placement.start, placement.size
                ),
                e,
            )
        })
    }

    fn destroy_gpu_instance(&mut self, gpu: u32, gpu_instance: u32) -> Result<(), ControlError> {
        let dev = self.device(gpu)?;
        raw::destroy_gpu_instance(&dev, gpu_instance).map_err(|e| {
            control_error(
                gpu,
                "nvmlGpuInstanceDestroy",
                format!("GPU instance {gpu_instance}"),
                e,
            )
        })
    }

    fn create_compute_instance(
        &mut self,
        gpu: u32,
        gpu_instance: u32,
    ) -> Result<u32, ControlError> {
        let slices = self.compute_slices(gpu, gpu_instance)?;
        let dev = self.device(gpu)?;
        raw::create_compute_instance(&dev, gpu_instance, slices).map_err(|e| {
            control_error(
                gpu,
                "nvmlGpuInstanceCreateComputeInstance",
                format!("a compute instance on GPU instance {gpu_instance}"),
                e,
            )
        })
    }

    fn destroy_compute_instance(
        &mut self,
        gpu: u32,
        gpu_instance: u32,
        compute_instance: u32,
    ) -> Result<(), ControlError> {
        let dev = self.device(gpu)?;
        raw::destroy_compute_instance(&dev, gpu_instance, compute_instance).map_err(|e| {
            control_error(
                gpu,
                "nvmlComputeInstanceDestroy",
                format!("compute instance {compute_instance} of GPU instance {gpu_instance}"),
                e,
            )
        })
    }
}
