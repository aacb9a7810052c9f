//! [`SimMigControl`]: the MIG write side of a simulated node, with its state in a JSON file.
//!
//! The state file (`--sim.state FILE`) keeps the node's MIG state between calls (and between
//! processes), so `tessera mig export → apply → assert` works on a simulated node as on a real
//! one. When the file does not exist, the state starts from the scenario's node: its MIG layouts,
//! and one running process for every scenario workload on the node (on its MIG instance, or on
//! the whole GPU). The file is rewritten (write to a temporary file, then rename) after every
//! successful write call, so a process killed between calls leaves a consistent state.
//!
//! The rules are the driver's, as far as tessera knows them (`shared/reference/mig-profiles.md`):
//! - create: the profile must exist and the placement be legal (else `Invalid`); MIG must be
//!   enabled now; an overlap, a max count, a second `+me` or too many compute slices is
//!   `InsufficientResources`. GPU instance ids follow the driver's pattern per placement.
//! - destroy: a GPU instance with compute instances, or any instance with processes, is `InUse`.
//! - MIG mode: `InUse` while processes run on the GPU or (to disable) GPU instances exist; on
//!   Ampere (no GPM) a change is pending until a reset, on Hopper and later it is immediate.
//! - fault injection: [`SimMigControl::fail_write_call`] makes the Nth write call of this
//!   instance fail (`Injected`) without changing anything.
//!
//! What it does not do: it never changes the scenario file, and it does not move workloads: a
//! process on a destroyed instance cannot exist (destroy is refused), and new instances start
//! without processes. Processes can be added or removed by editing the state file.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::SimNode;
use crate::mig::control::{
    Activation, ControlError, GpuInstanceState, GpuMigState, MigControl, MigNodeState,
    RunningProcess,
};
use crate::mig::{self, LayoutError, LayoutInstance};
use crate::model::{MigMode, Placement};

/// The state file's `format`.
pub const STATE_FORMAT: &str = "tessera-sim-mig-state";

/// The state file's content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimMigStateFile {
    /// Always [`STATE_FORMAT`].
    pub format: String,
    /// Always 1.
    pub version: u32,
    /// The scenario it was initialised from (informational).
    pub scenario: String,
    pub state: MigNodeState,
}

/// A simulated node's MIG write side.
#[derive(Debug)]
pub struct SimMigControl {
    state: MigNodeState,
    path: Option<PathBuf>,
    writes: u64,
    fail_at: Option<u64>,
    scenario: String,
}

/// The initial MIG state of a simulated node: its scenario layouts and workload processes.
pub fn initial_state(node: &SimNode) -> MigNodeState {
    let scenario = node.scenario();
    let mut gpus: Vec<GpuMigState> = node
        .gpus()
        .iter()
        .map(|g| {
            let supports = g.model.supports_mig();
            let mut instances: Vec<GpuInstanceState> = g
                .mig
                .iter()
                .flatten()
                .map(|m| GpuInstanceState {
                    gpu_instance_id: m.gpu_instance_id,
                    profile_id: m.layout.profile_id,
                    placement: m.layout.placement,
                    compute_instances: vec![m.compute_instance_id],
                    processes: Vec::new(),
                })
                .collect();
            instances.sort_by_key(|i| i.placement.start);
            GpuMigState {
                index: g.index,
                uuid: g.uuid.clone(),
                name: g.model.nvml_name.to_string(),
                model: Some(g.model.key.to_string()),
                mig_mode: supports.then_some(MigMode {
                    current: g.mig.is_some(),
                    pending: g.mig.is_some(),
                }),
                instances,
                processes: Vec::new(),
            }
        })
        .collect();
    for (w, spec) in scenario.workloads.iter().enumerate() {
        if spec.node != node.name() {
            continue;
        }
        let Some(gpu) = gpus.iter_mut().find(|g| g.index == spec.gpu) else {
            continue;
        };
        let owner = match (&spec.pod, &spec.slurm_job) {
            (Some(p), _) => Some(format!(
                "pod {}/{p}",
                spec.namespace.as_deref().unwrap_or("default")
            )),
            (None, Some(j)) => Some(format!("slurm job {j}")),
            (None, None) => None,
        };
        let proc = RunningProcess {
            pid: SimNode::pid(w),
            name: Some(spec.process.clone()),
            owner,
        };
        match spec.mig_start {
            Some(start) => {
                if let Some(i) = gpu
                    .instances
                    .iter_mut()
                    .find(|i| i.placement.start == start)
                {
                    i.processes.push(proc);
                }
            }
            None => gpu.processes.push(proc),
        }
    }
    MigNodeState {
        node: node.name().to_string(),
        gpus,
    }
}

impl SimMigControl {
    /// The MIG side of `node`, with its state in `state_path` (read when it exists, else
    /// initialised from the node and written on the first change). Without a path the state
    /// lives in memory only.
    pub fn open(node: &SimNode, state_path: Option<&Path>) -> Result<SimMigControl, ControlError> {
        let scenario = node.scenario().source.clone();
        let state = match state_path {
            Some(p) if p.exists() => {
                let err = |message: String| ControlError::State {
                    path: p.display().to_string(),
                    message,
                };
                let text = std::fs::read_to_string(p).map_err(|e| err(e.to_string()))?;
                let file: SimMigStateFile = serde_json::from_str(&text)
                    .map_err(|e| err(format!("not a simulated MIG state file: {e}")))?;
                if file.format != STATE_FORMAT || file.version != 1 {
                    return Err(err(format!(
                        "format {:?} version {}; expected {STATE_FORMAT:?} version 1",
                        file.format, file.version
                    )));
                }
                if file.state.node != node.name() {
                    return Err(err(format!(
                        "holds node {:?}, not {:?} (use a state file per node)",
                        file.state.node,
                        node.name()
                    )));
                }
                let expected: Vec<(u32, &str)> = node
                    .gpus()
                    .iter()
                    .map(|g| (g.index, g.uuid.as_str()))
                    .collect();
                let found: Vec<(u32, &str)> = file
                    .state
                    .gpus
                    .iter()
                    .map(|g| (g.index, g.uuid.as_str()))
                    .collect();
                if expected != found {
                    return Err(err(
                        "its GPUs are not the scenario node's (another scenario?)".into(),
                    ));
                }
                file.state
            }
            _ => initial_state(node),
        };
        Ok(SimMigControl {
            state,
            path: state_path.map(Path::to_path_buf),
            writes: 0,
            fail_at: None,
            scenario,
        })
    }

    /// Make the `n`th write call (1-based, counted from now on this instance) fail with
    /// [`ControlError::Injected`] without changing anything. `None` turns injection off.
    pub fn fail_write_call(&mut self, n: Option<u64>) {
        self.fail_at = n.map(|n| self.writes + n);
    }

    /// Write calls made so far (including failed ones).
    pub fn write_calls(&self) -> u64 {
        self.writes
    }

    /// The state as it is now.
    pub fn state(&self) -> &MigNodeState {
        &self.state
    }

    /// Replace the state (tests: add processes).
    pub fn set_state(&mut self, state: MigNodeState) -> Result<(), ControlError> {
        self.state = state;
        self.save()
    }

    fn save(&self) -> Result<(), ControlError> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let err = |message: String| ControlError::State {
            path: path.display().to_string(),
            message,
        };
        let file = SimMigStateFile {
            format: STATE_FORMAT.into(),
            version: 1,
            scenario: self.scenario.clone(),
            state: self.state.clone(),
        };
        let text = serde_json::to_string_pretty(&file).map_err(|e| err(e.to_string()))?;
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, text + "\n").map_err(|e| err(e.to_string()))?;
        std::fs::rename(&tmp, path).map_err(|e| err(e.to_string()))
    }

    /// Count a write call; fail it when it is the injected one.
    fn write_call(&mut self, call: &str) -> Result<(), ControlError> {
        self.writes += 1;
        if self.fail_at == Some(self.writes) {
            return Err(ControlError::Injected {
                n: self.writes,
                call: call.into(),
            });
        }
        Ok(())
    }

    fn gpu_mut(&mut self, gpu: u32) -> Result<&mut GpuMigState, ControlError> {
        self.state
            .gpus
            .iter_mut()
            .find(|g| g.index == gpu)
            .ok_or(ControlError::NotFound {
                gpu,
                what: "the GPU".into(),
            })
    }
}

fn model_of(g: &GpuMigState) -> Option<&'static mig::GpuModel> {
    g.model.as_deref().and_then(mig::model)
}

impl MigControl for SimMigControl {
    fn backend_name(&self) -> &'static str {
        "sim"
    }

    fn read_state(&mut self) -> Result<MigNodeState, ControlError> {
        Ok(self.state.clone())
    }

    fn set_mig_mode(&mut self, gpu: u32, enabled: bool) -> Result<Activation, ControlError> {
        self.write_call("nvmlDeviceSetMigMode")?;
        let g = self.gpu_mut(gpu)?;
        let model = model_of(g);
        let Some(mode) = g.mig_mode else {
            return Err(ControlError::Invalid {
                gpu,
                what: "MIG mode".into(),
                reason: format!("{} does not support MIG", g.name),
            });
        };
        if !g.processes.is_empty() || g.instances.iter().any(|i| !i.processes.is_empty()) {
            let processes = g
                .processes
                .iter()
                .chain(g.instances.iter().flat_map(|i| &i.processes))
                .cloned()
                .collect();
            return Err(ControlError::InUse {
                gpu,
                what: "the GPU".into(),
                processes,
            });
        }
        if !enabled && !g.instances.is_empty() {
            return Err(ControlError::InUse {
                gpu,
                what: format!("the GPU ({} GPU instances exist)", g.instances.len()),
                processes: Vec::new(),
            });
        }
        // Ampere (no GPM) needs a reset; Hopper and later switch at once.
        let immediate = model.is_some_and(|m| m.gpm);
        let new = if immediate {
            MigMode {
                current: enabled,
                pending: enabled,
            }
        } else {
            MigMode {
                current: mode.current,
                pending: enabled,
            }
        };
        g.mig_mode = Some(new);
        self.save()?;
        Ok(if new.current == enabled {
            Activation::Done
        } else {
            Activation::PendingReset
        })
    }

    fn create_gpu_instance(
        &mut self,
        gpu: u32,
        profile_id: u32,
        placement: Placement,
    ) -> Result<u32, ControlError> {
        self.write_call("nvmlDeviceCreateGpuInstanceWithPlacement")?;
        let g = self.gpu_mut(gpu)?;
        let what = format!(
            "profile {profile_id} at {{start: {}, size: {}}}",
            placement.start, placement.size
        );
        let invalid = |reason: String| ControlError::Invalid {
            gpu,
            what: what.clone(),
            reason,
        };
        let Some(model) = model_of(g) else {
            return Err(invalid("the simulated GPU has no MIG table".into()));
        };
        if !g.mig_current() {
            return Err(invalid("MIG mode is not enabled".into()));
        }
        let mut layout: Vec<LayoutInstance> = g
            .instances
            .iter()
            .map(|i| LayoutInstance {
                profile_id: i.profile_id,
                placement: i.placement,
            })
            .collect();
        let new = LayoutInstance {
            profile_id,
            placement,
        };
        // Placement legality on its own first: a bad argument, not a lack of room.
        if let Err(e) = mig::validate_layout(model, &[new]) {
            return Err(invalid(e.to_string()));
        }
        layout.push(new);
        if let Err(e) = mig::validate_layout(model, &layout) {
            let reason = match e {
                LayoutError::Overlap { .. }
                | LayoutError::TooMany { .. }
                | LayoutError::TooManyMediaExtensions { .. }
                | LayoutError::TooManyComputeSlices { .. } => e.to_string(),
                other => return Err(invalid(other.to_string())),
            };
            return Err(ControlError::InsufficientResources { gpu, what, reason });
        }
        let id = super::node::gpu_instance_id(&new);
        g.instances.push(GpuInstanceState {
            gpu_instance_id: id,
            profile_id,
            placement,
            compute_instances: Vec::new(),
            processes: Vec::new(),
        });
        g.instances.sort_by_key(|i| i.placement.start);
        self.save()?;
        Ok(id)
    }

    fn destroy_gpu_instance(&mut self, gpu: u32, gpu_instance: u32) -> Result<(), ControlError> {
        self.write_call("nvmlGpuInstanceDestroy")?;
        let g = self.gpu_mut(gpu)?;
        let Some(pos) = g
            .instances
            .iter()
            .position(|i| i.gpu_instance_id == gpu_instance)
        else {
            return Err(ControlError::NotFound {
                gpu,
                what: format!("GPU instance {gpu_instance}"),
            });
        };
        let inst = &g.instances[pos];
        if !inst.processes.is_empty() || !inst.compute_instances.is_empty() {
            return Err(ControlError::InUse {
                gpu,
                what: format!(
                    "GPU instance {gpu_instance} ({} compute instances)",
                    inst.compute_instances.len()
                ),
                processes: inst.processes.clone(),
            });
        }
        g.instances.remove(pos);
        self.save()
    }

    fn create_compute_instance(
        &mut self,
        gpu: u32,
        gpu_instance: u32,
    ) -> Result<u32, ControlError> {
        self.write_call("nvmlGpuInstanceCreateComputeInstance")?;
        let g = self.gpu_mut(gpu)?;
        let Some(inst) = g
            .instances
            .iter_mut()
            .find(|i| i.gpu_instance_id == gpu_instance)
        else {
            return Err(ControlError::NotFound {
                gpu,
                what: format!("GPU instance {gpu_instance}"),
            });
        };
        if !inst.compute_instances.is_empty() {
            return Err(ControlError::InsufficientResources {
                gpu,
                what: format!("a compute instance on GPU instance {gpu_instance}"),
                reason: "a compute instance already spans it".into(),
            });
        }
        inst.compute_instances.push(0);
        self.save()?;
        Ok(0)
    }

    fn destroy_compute_instance(
        &mut self,
        gpu: u32,
        gpu_instance: u32,
        compute_instance: u32,
    ) -> Result<(), ControlError> {
        self.write_call("nvmlComputeInstanceDestroy")?;
        let g = self.gpu_mut(gpu)?;
        let not_found = || ControlError::NotFound {
            gpu,
            what: format!("compute instance {compute_instance} of GPU instance {gpu_instance}"),
        };
        let Some(inst) = g
            .instances
            .iter_mut()
            .find(|i| i.gpu_instance_id == gpu_instance)
        else {
            return Err(not_found());
        };
        let Some(pos) = inst
            .compute_instances
            .iter()
            .position(|&c| c == compute_instance)
        else {
            return Err(not_found());
        };
        if !inst.processes.is_empty() {
            return Err(ControlError::InUse {
                gpu,
                what: format!("compute instance {compute_instance} of GPU instance {gpu_instance}"),
                processes: inst.processes.clone(),
            });
        }
        inst.compute_instances.remove(pos);
        self.save()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::Scenario;

    const SCENARIO: &str = r#"
name = "t"
seed = 1
start = "2026-11-02T00:00:00Z"
[[nodes]]
name = "n"
gpus = [{ model = "A100-80GB", count = 1 }, { model = "H100-80GB", count = 1 }]
mig = [{ gpu = 1, instances = [{ profile = "3g.40gb", start = 0 }, { profile = "1g.10gb", start = 4 }] }]
[[workloads]]
name = "chat"
kind = "inference"
node = "n"
gpu = 1
mig_start = 0
memory_gib = 10.0
process = "vllm"
namespace = "serving"
pod = "chat-0"
"#;

    fn control() -> SimMigControl {
        let s = Scenario::from_toml(SCENARIO, "t.toml").unwrap();
        let node = SimNode::new(&s, "n").unwrap();
        SimMigControl::open(&node, None).unwrap()
    }

    fn p(start: u32, size: u32) -> Placement {
        Placement { start, size }
    }

    #[test]
    fn initial_state_has_layouts_and_processes() {
        let mut c = control();
        let s = c.read_state().unwrap();
        assert_eq!(s.gpus.len(), 2);
        assert!(!s.gpus[0].mig_current());
        let h = &s.gpus[1];
        assert_eq!(h.instances.len(), 2);
        assert_eq!(h.instances[0].profile_id, 9);
        assert_eq!(h.instances[0].processes[0].name.as_deref(), Some("vllm"));
        assert_eq!(
            h.instances[0].processes[0].owner.as_deref(),
            Some("pod serving/chat-0")
        );
        assert!(h.instances[1].processes.is_empty());
    }

    #[test]
    fn placement_rules() {
        let mut c = control();
        // Overlap with the 3g at 0..4.
        let e = c.create_gpu_instance(1, 14, p(2, 2)).unwrap_err();
        assert!(
            matches!(e, ControlError::InsufficientResources { .. }),
            "{e}"
        );
        // Illegal placement: a 3g at 2.
        let e = c.create_gpu_instance(1, 9, p(2, 4)).unwrap_err();
        assert!(matches!(e, ControlError::Invalid { .. }), "{e}");
        // Unknown profile.
        let e = c.create_gpu_instance(1, 42, p(0, 1)).unwrap_err();
        assert!(matches!(e, ControlError::Invalid { .. }), "{e}");
        // One +me, then a second +me is refused.
        let id = c.create_gpu_instance(1, 20, p(5, 1)).unwrap();
        assert_eq!(id, 12);
        let e = c.create_gpu_instance(1, 20, p(6, 1)).unwrap_err();
        assert!(e.to_string().contains("+me"), "{e}");
        // Max count: 4g is at most one — fill a fresh GPU on Hopper.
        let id = c.create_gpu_instance(1, 19, p(6, 1)).unwrap();
        assert_eq!(id, 13);
        assert_eq!(c.read_state().unwrap().gpus[1].instances.len(), 4);
        // MIG disabled: no instances.
        let e = c.create_gpu_instance(0, 19, p(0, 1)).unwrap_err();
        assert!(e.to_string().contains("not enabled"), "{e}");
    }

    #[test]
    fn second_3g_overlaps_after_room_is_used() {
        let mut c = control();
        c.destroy_compute_instance(1, 11, 0).unwrap();
        c.destroy_gpu_instance(1, 11).unwrap();
        // 3g at 4 next to the busy 3g at 0, then a third 3g has no room left.
        let id = c.create_gpu_instance(1, 9, p(4, 4)).unwrap();
        assert_eq!(id, 2);
        let e = c.create_gpu_instance(1, 9, p(4, 4)).unwrap_err();
        assert!(
            matches!(e, ControlError::InsufficientResources { .. }),
            "{e}"
        );
    }

    #[test]
    fn in_use_and_ci_rules() {
        let mut c = control();
        // The 3g has a process: its compute instance and itself are in use.
        let e = c.destroy_compute_instance(1, 1, 0).unwrap_err();
        assert!(
            matches!(&e, ControlError::InUse { processes, .. } if processes[0].pid == SimNode::pid(0)),
            "{e}"
        );
        assert!(e.to_string().contains("vllm"), "{e}");
        let e = c.destroy_gpu_instance(1, 1).unwrap_err();
        assert!(matches!(e, ControlError::InUse { .. }));
        // The idle 1g: GI with a CI is in use until the CI is gone.
        assert!(matches!(
            c.destroy_gpu_instance(1, 11).unwrap_err(),
            ControlError::InUse { .. }
        ));
        c.destroy_compute_instance(1, 11, 0).unwrap();
        assert_eq!(c.create_compute_instance(1, 11).unwrap(), 0);
        assert!(matches!(
            c.create_compute_instance(1, 11).unwrap_err(),
            ControlError::InsufficientResources { .. }
        ));
        assert!(matches!(
            c.destroy_gpu_instance(1, 99).unwrap_err(),
            ControlError::NotFound { .. }
        ));
        // MIG mode cannot change while processes run.
        assert!(matches!(
            c.set_mig_mode(1, false).unwrap_err(),
            ControlError::InUse { .. }
        ));
    }

    #[test]
    fn mig_mode_pending_on_ampere_immediate_on_hopper() {
        let mut c = control();
        assert_eq!(c.set_mig_mode(0, true).unwrap(), Activation::PendingReset);
        let g = c.read_state().unwrap().gpus[0].clone();
        assert_eq!(
            g.mig_mode,
            Some(MigMode {
                current: false,
                pending: true
            })
        );
        // Still disabled now: no instances.
        assert!(c.create_gpu_instance(0, 0, p(0, 8)).is_err());
        // Cancelling the pending change is done at once.
        assert_eq!(c.set_mig_mode(0, false).unwrap(), Activation::Done);
        // Hopper: empty the GPU, disable, enable, immediately.
        let mut s = c.read_state().unwrap();
        s.gpus[1].instances[0].processes.clear();
        c.set_state(s).unwrap();
        for gi in [1, 11] {
            c.destroy_compute_instance(1, gi, 0).unwrap();
            c.destroy_gpu_instance(1, gi).unwrap();
        }
        assert_eq!(c.set_mig_mode(1, false).unwrap(), Activation::Done);
        assert!(!c.read_state().unwrap().gpus[1].mig_current());
        assert_eq!(c.set_mig_mode(1, true).unwrap(), Activation::Done);
        assert_eq!(c.create_gpu_instance(1, 0, p(0, 8)).unwrap(), 0);
    }

    #[test]
    fn injected_fault_changes_nothing_and_state_file_persists() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let s = Scenario::from_toml(SCENARIO, "t.toml").unwrap();
        let node = SimNode::new(&s, "n").unwrap();
        let mut c = SimMigControl::open(&node, Some(&path)).unwrap();
        c.fail_write_call(Some(2));
        c.destroy_compute_instance(1, 11, 0).unwrap();
        let before = c.read_state().unwrap();
        let e = c.destroy_gpu_instance(1, 11).unwrap_err();
        assert!(matches!(e, ControlError::Injected { n: 2, .. }), "{e}");
        assert_eq!(c.read_state().unwrap(), before);
        c.destroy_gpu_instance(1, 11).unwrap();
        let mut again = SimMigControl::open(&node, Some(&path)).unwrap();
        assert_eq!(again.read_state().unwrap().gpus[1].instances.len(), 1);
        // A state file of another node is refused.
        let other = Scenario::from_toml(&SCENARIO.replace("\"n\"", "\"m\""), "o.toml").unwrap();
        let m = SimNode::new(&other, "m").unwrap();
        let e = SimMigControl::open(&m, Some(&path)).unwrap_err();
        assert!(e.to_string().contains("not \"m\""), "{e}");
        std::fs::write(&path, "{").unwrap();
        assert!(SimMigControl::open(&node, Some(&path)).is_err());
    }
}
