//! Applying a MIG layout safely: targets from a plan, the diff against the node, the exact
//! steps, and their execution with a checkpoint, rollback, a journal and a lock.
//!
//! - [`read_plan`] + [`targets`]: a tessera plan (`tessera-mig-plan` v1, [`crate::mig::plan`]) or
//!   an nvidia-mig-parted v1 file ([`crate::mig::parted`], placed largest first, keeping the
//!   current placements when the profile mix is unchanged) → one [`GpuTarget`] per GPU of this
//!   node the plan names. GPUs the plan does not name are never touched; a plan naming none of
//!   this node's GPUs is an error ([`ApplyError::NoGpuOfNode`]), never an empty check.
//! - [`diff`]: current state vs targets by (profile id, placement): only differing instances are
//!   destroyed or created; matching instances are left alone. A MIG mode change that a GPU reset
//!   must complete is a *pending* note, not a step.
//! - [`Applier::execute`]: refuses before any change when an instance to destroy (or a GPU whose
//!   mode changes) has processes; records the checkpoint (the state before), runs each step and
//!   journals it; on any failure restores the checkpoint (destroying what was partly created) and
//!   checks the result; afterwards checks the node against the targets.
//! - [`Applier::open`]: the lock, then the journal with a torn last line cut off
//!   ([`Journal::repair_tail`]). [`Applier::recover`]: a run interrupted mid-way (its journal
//!   `begin` has no `end`) is restored to its checkpoint by the next run.
//! - [`export_plan`] / [`export_mig_parted`]: the node's current layout in either format.
//!
//! Never: reset a GPU (a pending mode change is reported with the command the operator must run),
//! or touch a GPU or instance that already matches.

pub mod journal;
pub mod lock;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use journal::{Interrupted, Journal, Record, TornTail};
pub use lock::ApplyLock;

use crate::mig::control::{
    Activation, ControlError, GpuInstanceState, GpuMigState, MigControl, MigNodeState,
};
use crate::mig::parted::{self, MigConfigError, MigConfigFile};
use crate::mig::plan::{GpuLayout, MigPlanError, MigPlanFile, PlannedInstance};
use crate::mig::{self, GpuModel, LayoutInstance};
use crate::model::{GpuInfo, Inventory, Placement};

/// Errors of export, assert and apply.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error(transparent)]
    Plan(#[from] MigPlanError),
    #[error(transparent)]
    MigParted(#[from] MigConfigError),
    #[error("cannot read plan {path}: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    /// The plan does not fit this node (missing GPU, other UUID or model, MIG unsupported).
    #[error("{source_name}: GPU {gpu}: {message}")]
    Target {
        source_name: String,
        gpu: u32,
        message: String,
    },
    /// The selected config names no GPU of this node: nothing would be checked or changed.
    #[error("{source_name}, config {label:?}, names no GPU of node {node}: {detail}")]
    NoGpuOfNode {
        source_name: String,
        label: String,
        node: String,
        detail: String,
    },
    #[error(transparent)]
    Control(#[from] ControlError),
    /// Instances to destroy (or GPUs whose mode changes) have running processes: nothing changed.
    #[error(
        "refusing to apply: processes run where the plan changes the layout (nothing was changed):\n{}",
        .0.join("\n")
    )]
    Busy(Vec<String>),
    #[error(
        "another tessera mig apply holds the lock {path} ({holder}); wait for it to finish, or choose another --lock only if it manages other GPUs"
    )]
    LockHeld { path: PathBuf, holder: String },
    #[error("lock file {path}: {message}")]
    Lock { path: PathBuf, message: String },
    #[error("journal {path}: {message}")]
    Journal { path: PathBuf, message: String },
    /// A step failed; the checkpoint was restored.
    #[error(
        "step {step} failed: {error}; rolled back to the state before the apply (journal: {journal})"
    )]
    RolledBack {
        step: String,
        error: String,
        journal: PathBuf,
    },
    /// A step failed and the restore did not reach the checkpoint either.
    #[error(
        "{context}; restoring the checkpoint failed too: {errors}. The journal {journal} keeps the checkpoint: the next tessera mig apply retries the restore"
    )]
    RestoreIncomplete {
        context: String,
        errors: String,
        journal: PathBuf,
    },
    /// Every step succeeded but the node still differs from the plan.
    #[error("after applying, the node still differs from the plan:\n{0}")]
    StillDiffers(String),
}

/// One instance of a target layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetInstance {
    pub profile_id: u32,
    pub placement: Placement,
    /// Whether it must carry a compute instance (always for plans; as found for checkpoints).
    pub compute: bool,
}

/// What one GPU must look like.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuTarget {
    pub gpu: u32,
    pub mig_enabled: bool,
    pub instances: Vec<TargetInstance>,
}

/// A plan file of either format.
#[derive(Debug, Clone)]
pub enum PlanSource {
    Tessera(MigPlanFile),
    MigParted(MigConfigFile),
}

/// Read a plan: a tessera plan (it has `kind:`) or a mig-parted v1 file (it has `mig-configs:`).
pub fn read_plan(path: &Path) -> Result<PlanSource, ApplyError> {
    // Size and nesting are checked before any YAML is parsed, also the format sniffing below
    // (a deeply nested file would otherwise take minutes: issue 17).
    let read_err = |error: std::io::Error| ApplyError::Read {
        path: path.to_path_buf(),
        error,
    };
    let limit = |e: crate::input_limits::LimitError| {
        read_err(std::io::Error::new(std::io::ErrorKind::InvalidData, e))
    };
    let text = crate::input_limits::read_to_string(path, crate::input_limits::MAX_YAML_BYTES)
        .map_err(|e| match e {
            crate::input_limits::ReadError::Io(e) => read_err(e),
            crate::input_limits::ReadError::Limit(e) => limit(e),
        })?;
    crate::input_limits::check_yaml(&text).map_err(limit)?;
    let source = path.display().to_string();
    let is_tessera = serde_yaml_ng::from_str::<serde_yaml_ng::Value>(&text)
        .ok()
        .and_then(|v| v.get("kind").cloned())
        .is_some();
    Ok(if is_tessera {
        PlanSource::Tessera(MigPlanFile::parse(&text, &source)?)
    } else {
        PlanSource::MigParted(MigConfigFile::parse(&text, &source)?)
    })
}

fn gpu_info(g: &GpuMigState) -> GpuInfo {
    GpuInfo {
        index: g.index,
        uuid: g.uuid.clone(),
        name: g.name.clone(),
        pci_bus_id: String::new(),
        memory_total_bytes: None,
        power_limit_watts: None,
        mig_mode: g.mig_mode,
        mig_instances: Vec::new(),
    }
}

fn model_of(g: &GpuMigState) -> Option<&'static GpuModel> {
    g.model
        .as_deref()
        .and_then(mig::model)
        .or_else(|| mig::model_by_nvml_name(&g.name))
}

fn full(l: &LayoutInstance) -> TargetInstance {
    TargetInstance {
        profile_id: l.profile_id,
        placement: l.placement,
        compute: true,
    }
}

/// The targets of config `label` (or the only config) of `plan` for this node; returns the
/// label chosen too. A config that names no GPU of this node is [`ApplyError::NoGpuOfNode`]:
/// asserting or applying it would check nothing.
pub fn targets(
    plan: &PlanSource,
    label: Option<&str>,
    source_name: &str,
    state: &MigNodeState,
) -> Result<(String, Vec<GpuTarget>), ApplyError> {
    let (label, out) = targets_of(plan, label, source_name, state)?;
    if !out.is_empty() {
        return Ok((label, out));
    }
    let detail = match plan {
        PlanSource::Tessera(p) => {
            let nodes: BTreeSet<&str> = p
                .configs
                .get(&label)
                .into_iter()
                .flatten()
                .filter_map(|l| l.node.as_deref())
                .collect();
            if nodes.is_empty() {
                "the config has no GPU entries; check --config".to_string()
            } else {
                format!(
                    "its GPU entries are for node{} {}; check the node name (--node; default: the host name) and --config",
                    if nodes.len() == 1 { "" } else { "s" },
                    nodes.into_iter().collect::<Vec<_>>().join(", ")
                )
            }
        }
        PlanSource::MigParted(_) => format!(
            "no entry's devices or device-filter selects one of its {} GPUs; check --config",
            state.gpus.len()
        ),
    };
    Err(ApplyError::NoGpuOfNode {
        source_name: source_name.to_string(),
        label,
        node: state.node.clone(),
        detail,
    })
}

fn targets_of(
    plan: &PlanSource,
    label: Option<&str>,
    source_name: &str,
    state: &MigNodeState,
) -> Result<(String, Vec<GpuTarget>), ApplyError> {
    let target_err = |gpu: u32, message: String| ApplyError::Target {
        source_name: source_name.to_string(),
        gpu,
        message,
    };
    match plan {
        PlanSource::Tessera(p) => {
            let (label, layouts) = p.config(label, source_name)?;
            let mut out = Vec::new();
            for l in layouts.iter().filter(|l| l.applies_to(&state.node)) {
                let Some(g) = state.gpu(l.gpu) else {
                    return Err(target_err(
                        l.gpu,
                        format!(
                            "no such GPU on node {} (it has {} GPUs)",
                            state.node,
                            state.gpus.len()
                        ),
                    ));
                };
                if let Some(u) = &l.uuid
                    && u != &g.uuid
                {
                    return Err(target_err(
                        l.gpu,
                        format!(
                            "the plan is for {u}, but GPU {} is {} (GPUs renumbered?)",
                            l.gpu, g.uuid
                        ),
                    ));
                }
                let model = model_of(g);
                if model.is_none_or(|m| !m.key.eq_ignore_ascii_case(&l.model)) {
                    return Err(target_err(
                        l.gpu,
                        format!(
                            "the plan is for model {}, but this GPU is {} ({})",
                            l.model,
                            model.map_or("a model tessera does not know", |m| m.key),
                            g.name
                        ),
                    ));
                }
                out.push(GpuTarget {
                    gpu: l.gpu,
                    mig_enabled: l.mig_enabled,
                    instances: l.layout().iter().map(full).collect(),
                });
            }
            Ok((label.to_string(), out))
        }
        PlanSource::MigParted(f) => {
            let label = match label {
                Some(l) => l.to_string(),
                None if f.configs.len() == 1 => {
                    f.configs.keys().next().cloned().unwrap_or_default()
                }
                None => {
                    return Err(ApplyError::Plan(MigPlanError::AmbiguousLabel {
                        path: source_name.into(),
                        available: f.configs.keys().cloned().collect::<Vec<_>>().join(", "),
                    }));
                }
            };
            let plan = f.select(&label)?;
            let inventory = Inventory {
                node: state.node.clone(),
                driver_version: None,
                cuda_version: None,
                gpus: state.gpus.iter().map(gpu_info).collect(),
            };
            plan.check(&inventory)?;
            let mut out = Vec::new();
            for g in &state.gpus {
                let entry = plan
                    .entry_for(&gpu_info(g))
                    .map_err(|m| target_err(g.index, m))?;
                let Some(entry) = entry else { continue };
                if !entry.mig_enabled {
                    out.push(GpuTarget {
                        gpu: g.index,
                        mig_enabled: false,
                        instances: Vec::new(),
                    });
                    continue;
                }
                let model = model_of(g).ok_or_else(|| {
                    target_err(g.index, "tessera has no MIG table for this model".into())
                })?;
                let mut ids = Vec::new();
                for (name, count) in &entry.mig_devices {
                    let p = model.profile_by_name(name).ok_or_else(|| {
                        target_err(g.index, format!("no profile {name:?} on {}", model.key))
                    })?;
                    ids.extend(std::iter::repeat_n(p.id, *count as usize));
                }
                ids.sort_unstable();
                let mut current: Vec<u32> = g.instances.iter().map(|i| i.profile_id).collect();
                current.sort_unstable();
                // Same profile mix as now: keep the current placements (nothing to change).
                let layout = if g.mig_current() && current == ids {
                    g.instances
                        .iter()
                        .map(|i| LayoutInstance {
                            profile_id: i.profile_id,
                            placement: i.placement,
                        })
                        .collect()
                } else {
                    parted::place(model, &ids).map_err(|m| target_err(g.index, m))?
                };
                out.push(GpuTarget {
                    gpu: g.index,
                    mig_enabled: true,
                    instances: layout.iter().map(full).collect(),
                });
            }
            Ok((label, out))
        }
    }
}

/// The checkpoint as targets: every MIG-capable GPU as it was (mode as pending, instances with
/// their compute instances as found).
pub fn checkpoint_targets(checkpoint: &MigNodeState) -> Vec<GpuTarget> {
    checkpoint
        .gpus
        .iter()
        .filter(|g| g.mig_mode.is_some())
        .map(|g| GpuTarget {
            gpu: g.index,
            mig_enabled: g.mig_pending(),
            instances: g
                .instances
                .iter()
                .map(|i| TargetInstance {
                    profile_id: i.profile_id,
                    placement: i.placement,
                    compute: !i.compute_instances.is_empty(),
                })
                .collect(),
        })
        .collect()
}

/// One device call of an apply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub enum Step {
    SetMigMode {
        gpu: u32,
        enabled: bool,
    },
    DestroyComputeInstance {
        gpu: u32,
        gpu_instance: u32,
        compute_instance: u32,
        profile: String,
        placement: Placement,
    },
    DestroyGpuInstance {
        gpu: u32,
        gpu_instance: u32,
        profile: String,
        placement: Placement,
    },
    CreateGpuInstance {
        gpu: u32,
        profile_id: u32,
        profile: String,
        placement: Placement,
    },
    /// One compute instance spanning the GPU instance at `placement`.
    CreateComputeInstance {
        gpu: u32,
        profile_id: u32,
        profile: String,
        placement: Placement,
    },
}

fn at(p: &Placement) -> String {
    format!("{{start: {}, size: {}}}", p.start, p.size)
}

impl Step {
    pub fn gpu(&self) -> u32 {
        match self {
            Step::SetMigMode { gpu, .. }
            | Step::DestroyComputeInstance { gpu, .. }
            | Step::DestroyGpuInstance { gpu, .. }
            | Step::CreateGpuInstance { gpu, .. }
            | Step::CreateComputeInstance { gpu, .. } => *gpu,
        }
    }
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Step::SetMigMode { enabled, .. } => {
                write!(
                    f,
                    "{} MIG mode",
                    if *enabled { "enable" } else { "disable" }
                )
            }
            Step::DestroyComputeInstance {
                gpu_instance,
                compute_instance,
                profile,
                placement,
                ..
            } => write!(
                f,
                "destroy compute instance {compute_instance} of GPU instance {gpu_instance} ({profile} at {})",
                at(placement)
            ),
            Step::DestroyGpuInstance {
                gpu_instance,
                profile,
                placement,
                ..
            } => write!(
                f,
                "destroy GPU instance {gpu_instance} ({profile} at {})",
                at(placement)
            ),
            Step::CreateGpuInstance {
                profile_id,
                profile,
                placement,
                ..
            } => write!(
                f,
                "create GPU instance {profile} (profile id {profile_id}) at {}",
                at(placement)
            ),
            Step::CreateComputeInstance {
                profile, placement, ..
            } => write!(
                f,
                "create a compute instance spanning the {profile} GPU instance at {}",
                at(placement)
            ),
        }
    }
}

/// How one GPU differs from its target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuDiff {
    pub gpu: u32,
    pub uuid: String,
    /// Readable differences (what `assert` prints).
    pub differences: Vec<String>,
    /// Device calls that remove the differences, in order.
    pub steps: Vec<Step>,
    /// Differences only a GPU reset resolves (never done by tessera), with what to do.
    pub pending: Vec<String>,
    /// Processes in the way of a step (instance to destroy, GPU whose mode changes).
    pub busy: Vec<String>,
}

/// How the node differs from the targets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diff {
    pub node: String,
    pub gpus: Vec<GpuDiff>,
}

impl Diff {
    /// Whether the node matches: no difference at all (pending changes count as differences).
    pub fn matches(&self) -> bool {
        self.gpus.iter().all(|g| g.differences.is_empty())
    }

    /// Every step, in order.
    pub fn steps(&self) -> Vec<Step> {
        self.gpus.iter().flat_map(|g| g.steps.clone()).collect()
    }

    /// Everything that blocks the steps.
    pub fn busy(&self) -> Vec<String> {
        self.gpus.iter().flat_map(|g| g.busy.clone()).collect()
    }

    /// Pending notes.
    pub fn pending(&self) -> Vec<String> {
        self.gpus.iter().flat_map(|g| g.pending.clone()).collect()
    }

    /// The differences as text, one GPU per block.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for g in self.gpus.iter().filter(|g| !g.differences.is_empty()) {
            let _ = writeln!(out, "node {} GPU {} ({}):", self.node, g.gpu, g.uuid);
            for d in &g.differences {
                let _ = writeln!(out, "  {d}");
            }
        }
        out
    }

    /// The steps as numbered text.
    pub fn render_steps(&self) -> String {
        let mut out = String::new();
        let mut n = 0;
        for g in &self.gpus {
            for s in &g.steps {
                n += 1;
                let _ = writeln!(out, "{n:>3}. GPU {} ({}): {s}", g.gpu, g.uuid);
            }
        }
        out
    }
}

fn profile_name(model: Option<&GpuModel>, id: u32) -> String {
    model
        .and_then(|m| m.profile(id))
        .map_or_else(|| format!("profile {id}"), |p| p.name.clone())
}

fn procs(gpu: u32, what: &str, list: &[crate::mig::control::RunningProcess]) -> Option<String> {
    (!list.is_empty()).then(|| {
        format!(
            "  GPU {gpu} {what}: {}",
            list.iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )
    })
}

fn reset_hint(g: &GpuMigState, change: &str) -> String {
    format!(
        "GPU {} ({}): {change} is pending a GPU reset; tessera never resets a GPU. Stop its workloads, then run `nvidia-smi -r -i {}` (or reboot), then run tessera mig apply again",
        g.index, g.uuid, g.index
    )
}

/// Compare the node with the targets. GPUs without a target are left out.
pub fn diff(state: &MigNodeState, targets: &[GpuTarget]) -> Result<Diff, ApplyError> {
    let mut gpus = Vec::new();
    for t in targets {
        let g = state.gpu(t.gpu).ok_or_else(|| ApplyError::Target {
            source_name: "plan".into(),
            gpu: t.gpu,
            message: format!("no such GPU on node {}", state.node),
        })?;
        let model = model_of(g);
        let mut d = GpuDiff {
            gpu: g.index,
            uuid: g.uuid.clone(),
            differences: Vec::new(),
            steps: Vec::new(),
            pending: Vec::new(),
            busy: Vec::new(),
        };
        let Some(mode) = g.mig_mode else {
            if t.mig_enabled {
                return Err(ApplyError::Target {
                    source_name: "plan".into(),
                    gpu: t.gpu,
                    message: format!("{} does not support MIG", g.name),
                });
            }
            gpus.push(d);
            continue;
        };
        let gpu_procs = || {
            g.processes
                .iter()
                .chain(g.instances.iter().flat_map(|i| &i.processes))
                .cloned()
                .collect::<Vec<_>>()
        };
        let word = |b: bool| if b { "enabled" } else { "disabled" };
        let mut current: &[GpuInstanceState] = &[];
        let mut instances_changeable = false;
        if t.mig_enabled {
            if !mode.pending {
                d.differences
                    .push(format!("MIG mode: {}, plan: enabled", word(mode.current)));
                d.steps.push(Step::SetMigMode {
                    gpu: g.index,
                    enabled: true,
                });
                d.busy
                    .extend(procs(g.index, "(MIG mode change)", &gpu_procs()));
                if mode.current {
                    current = &g.instances;
                }
                instances_changeable = true;
            } else if !mode.current {
                d.differences
                    .push("MIG mode: disabled, enable pending a GPU reset; plan: enabled".into());
                d.pending.push(reset_hint(g, "enabling MIG"));
            } else {
                current = &g.instances;
                instances_changeable = true;
            }
        } else if mode.current && mode.pending {
            d.differences
                .push("MIG mode: enabled, plan: disabled".into());
            current = &g.instances;
            instances_changeable = true;
        } else if mode.current {
            d.differences
                .push("MIG mode: enabled, disable pending a GPU reset; plan: disabled".into());
            d.pending.push(reset_hint(g, "disabling MIG"));
        } else if mode.pending {
            d.differences
                .push("MIG mode: disabled, enable pending a GPU reset; plan: disabled".into());
            d.steps.push(Step::SetMigMode {
                gpu: g.index,
                enabled: false,
            });
        }
        if instances_changeable {
            let want: &[TargetInstance] = if t.mig_enabled { &t.instances } else { &[] };
            let key = |p: u32, pl: Placement| (p, pl);
            let want_keys: BTreeSet<(u32, Placement)> = want
                .iter()
                .map(|i| key(i.profile_id, i.placement))
                .collect();
            let have_keys: BTreeSet<(u32, Placement)> = current
                .iter()
                .map(|i| key(i.profile_id, i.placement))
                .collect();
            for i in current {
                let name = profile_name(model, i.profile_id);
                if want_keys.contains(&key(i.profile_id, i.placement)) {
                    let w = want
                        .iter()
                        .find(|w| w.profile_id == i.profile_id && w.placement == i.placement)
                        .expect("in want_keys");
                    if w.compute && i.compute_instances.is_empty() {
                        d.differences.push(format!(
                            "{name} at {}: no compute instance",
                            at(&i.placement)
                        ));
                        d.steps.push(Step::CreateComputeInstance {
                            gpu: g.index,
                            profile_id: i.profile_id,
                            profile: name,
                            placement: i.placement,
                        });
                    } else if !w.compute && !i.compute_instances.is_empty() {
                        d.differences.push(format!(
                            "{name} at {}: compute instances {:?}, expected none",
                            at(&i.placement),
                            i.compute_instances
                        ));
                        for ci in &i.compute_instances {
                            d.steps.push(Step::DestroyComputeInstance {
                                gpu: g.index,
                                gpu_instance: i.gpu_instance_id,
                                compute_instance: *ci,
                                profile: name.clone(),
                                placement: i.placement,
                            });
                        }
                        d.busy.extend(procs(
                            g.index,
                            &format!("instance {name} at {}", at(&i.placement)),
                            &i.processes,
                        ));
                    }
                    continue;
                }
                d.differences.push(format!(
                    "extra: {name} (profile id {}) at {} (GPU instance {})",
                    i.profile_id,
                    at(&i.placement),
                    i.gpu_instance_id
                ));
                d.busy.extend(procs(
                    g.index,
                    &format!("instance {name} at {} (to destroy)", at(&i.placement)),
                    &i.processes,
                ));
                for ci in &i.compute_instances {
                    d.steps.push(Step::DestroyComputeInstance {
                        gpu: g.index,
                        gpu_instance: i.gpu_instance_id,
                        compute_instance: *ci,
                        profile: name.clone(),
                        placement: i.placement,
                    });
                }
                d.steps.push(Step::DestroyGpuInstance {
                    gpu: g.index,
                    gpu_instance: i.gpu_instance_id,
                    profile: name,
                    placement: i.placement,
                });
            }
            // Creates after destroys, largest first (a 3g created last can find no room).
            let mut create: Vec<&TargetInstance> = want
                .iter()
                .filter(|i| !have_keys.contains(&key(i.profile_id, i.placement)))
                .collect();
            create.sort_by_key(|i| (std::cmp::Reverse(i.placement.size), i.placement.start));
            for i in create {
                let name = profile_name(model, i.profile_id);
                d.differences.push(format!(
                    "missing: {name} (profile id {}) at {}",
                    i.profile_id,
                    at(&i.placement)
                ));
                d.steps.push(Step::CreateGpuInstance {
                    gpu: g.index,
                    profile_id: i.profile_id,
                    profile: name.clone(),
                    placement: i.placement,
                });
                if i.compute {
                    d.steps.push(Step::CreateComputeInstance {
                        gpu: g.index,
                        profile_id: i.profile_id,
                        profile: name,
                        placement: i.placement,
                    });
                }
            }
            if !t.mig_enabled {
                d.steps.push(Step::SetMigMode {
                    gpu: g.index,
                    enabled: false,
                });
                d.busy
                    .extend(procs(g.index, "(MIG mode change)", &g.processes));
            }
        }
        gpus.push(d);
    }
    Ok(Diff {
        node: state.node.clone(),
        gpus,
    })
}

/// What one executed step did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepOutcome {
    pub step: Step,
    /// `ok`, `pending-reset`, `skipped: …`.
    pub result: String,
}

/// The result of a successful [`Applier::execute`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub steps: Vec<StepOutcome>,
    /// Mode changes waiting for a GPU reset, with what the operator must do.
    pub pending: Vec<String>,
}

/// What [`Applier::recover`] did.
#[derive(Debug, Clone, PartialEq)]
pub struct Recovered {
    pub run: String,
    pub started: String,
    pub plan: Option<String>,
    /// Restore steps taken.
    pub steps: usize,
}

/// A held apply session: the lock and the journal.
#[derive(Debug)]
pub struct Applier {
    _lock: ApplyLock,
    journal: Journal,
    run: String,
    /// A torn last journal line found (and cut off) when the session opened.
    pub torn_tail: Option<TornTail>,
    /// Test hook: abort the process right after journaling this step (1-based).
    pub abort_after_step: Option<u64>,
}

/// `GPU N (UUID)` of a step, the UUID from the state it was planned on.
fn target_of(step: &Step, state: &MigNodeState) -> String {
    match state.gpu(step.gpu()) {
        Some(g) => format!("GPU {} ({})", g.index, g.uuid),
        None => format!("GPU {}", step.gpu()),
    }
}

/// Run one step; returns the activation for mode changes.
fn run_step(
    ctrl: &mut dyn MigControl,
    step: &Step,
    created: &mut BTreeMap<(u32, Placement), u32>,
) -> Result<Option<Activation>, ControlError> {
    match step {
        Step::SetMigMode { gpu, enabled } => ctrl.set_mig_mode(*gpu, *enabled).map(Some),
        Step::DestroyComputeInstance {
            gpu,
            gpu_instance,
            compute_instance,
            ..
        } => ctrl
            .destroy_compute_instance(*gpu, *gpu_instance, *compute_instance)
            .map(|_| None),
        Step::DestroyGpuInstance {
            gpu, gpu_instance, ..
        } => ctrl.destroy_gpu_instance(*gpu, *gpu_instance).map(|_| None),
        Step::CreateGpuInstance {
            gpu,
            profile_id,
            placement,
            ..
        } => {
            let id = ctrl.create_gpu_instance(*gpu, *profile_id, *placement)?;
            created.insert((*gpu, *placement), id);
            Ok(None)
        }
        Step::CreateComputeInstance {
            gpu,
            profile_id,
            placement,
            ..
        } => {
            let gi = match created.get(&(*gpu, *placement)) {
                Some(id) => *id,
                None => ctrl
                    .read_state()?
                    .gpu(*gpu)
                    .and_then(|g| {
                        g.instances
                            .iter()
                            .find(|i| i.profile_id == *profile_id && i.placement == *placement)
                    })
                    .map(|i| i.gpu_instance_id)
                    .ok_or(ControlError::NotFound {
                        gpu: *gpu,
                        what: format!("the GPU instance at {}", at(placement)),
                    })?,
            };
            ctrl.create_compute_instance(*gpu, gi).map(|_| None)
        }
    }
}

impl Applier {
    /// Take the lock (failing at once when another apply holds it) and open the journal,
    /// cutting off a torn last line ([`Journal::repair_tail`]; reported in `torn_tail`).
    pub fn open(lock: &Path, journal: &Path) -> Result<Applier, ApplyError> {
        let lock = ApplyLock::acquire(lock)?;
        let run = format!(
            "{}-{}",
            chrono::Utc::now().format("%Y%m%dT%H%M%S%.3fZ"),
            std::process::id()
        );
        let journal = Journal::new(journal);
        let torn_tail = journal.repair_tail()?;
        Ok(Applier {
            _lock: lock,
            journal,
            run,
            torn_tail,
            abort_after_step: None,
        })
    }

    pub fn journal(&self) -> &Journal {
        &self.journal
    }

    fn log_step(
        &self,
        event: &str,
        n: u64,
        step: &Step,
        state: &MigNodeState,
        result: &str,
    ) -> Result<(), ApplyError> {
        let mut r = Journal::record(&self.run, event);
        r.step = Some(n);
        r.target = Some(target_of(step, state));
        r.action = Some(step.to_string());
        r.result = Some(result.to_string());
        self.journal.append(&r)
    }

    fn end(&self, run: &str, result: &str) -> Result<(), ApplyError> {
        let mut r = Journal::record(run, "end");
        r.result = Some(result.into());
        self.journal.append(&r)
    }

    /// Bring the node back to `checkpoint`; journal each step under `event`. Returns the
    /// number of steps, or the errors when the node does not match the checkpoint afterwards.
    fn restore(
        &self,
        ctrl: &mut dyn MigControl,
        checkpoint: &MigNodeState,
        event: &str,
    ) -> Result<usize, String> {
        let targets = checkpoint_targets(checkpoint);
        let state = ctrl.read_state().map_err(|e| e.to_string())?;
        let d = diff(&state, &targets).map_err(|e| e.to_string())?;
        let mut errors = Vec::new();
        let mut created = BTreeMap::new();
        let steps = d.steps();
        for (i, step) in steps.iter().enumerate() {
            let result = match run_step(ctrl, step, &mut created) {
                Ok(_) => "ok".to_string(),
                Err(e) => {
                    errors.push(format!("{step}: {e}"));
                    format!("error: {e}")
                }
            };
            if let Err(e) = self.log_step(event, i as u64 + 1, step, checkpoint, &result) {
                errors.push(e.to_string());
            }
        }
        let after = ctrl.read_state().map_err(|e| e.to_string())?;
        let check = diff(&after, &targets).map_err(|e| e.to_string())?;
        if !check.steps().is_empty() {
            errors.push(format!("still differs:\n{}", check.render()));
        }
        if errors.is_empty() {
            Ok(steps.len())
        } else {
            Err(errors.join("; "))
        }
    }

    /// When the journal holds an interrupted run, restore its checkpoint and close it.
    pub fn recover(&self, ctrl: &mut dyn MigControl) -> Result<Option<Recovered>, ApplyError> {
        let Some(i) = self.journal.interrupted()? else {
            return Ok(None);
        };
        let mut r = Journal::record(&i.run, "recover");
        r.result = Some(format!("by run {}", self.run));
        self.journal.append(&r)?;
        match self.restore(ctrl, &i.checkpoint, "recover-step") {
            Ok(steps) => {
                self.end(&i.run, "recovered")?;
                Ok(Some(Recovered {
                    run: i.run,
                    started: i.started,
                    plan: i.plan,
                    steps,
                }))
            }
            Err(errors) => Err(ApplyError::RestoreIncomplete {
                context: format!("recovering the interrupted apply {}", i.run),
                errors,
                journal: self.journal.path().to_path_buf(),
            }),
        }
    }

    /// Execute `diff`'s steps from `checkpoint` (the state `diff` was computed from); on any
    /// failure restore the checkpoint. `plan` names the plan and label in the journal.
    pub fn execute(
        &self,
        ctrl: &mut dyn MigControl,
        checkpoint: &MigNodeState,
        targets: &[GpuTarget],
        diff: &Diff,
        plan: &str,
    ) -> Result<Applied, ApplyError> {
        if let Some(i) = self.journal.interrupted()? {
            return Err(ApplyError::Journal {
                path: self.journal.path().to_path_buf(),
                message: format!(
                    "the apply {} started at {} was interrupted; recover it first",
                    i.run, i.started
                ),
            });
        }
        let busy = diff.busy();
        if !busy.is_empty() {
            return Err(ApplyError::Busy(busy));
        }
        let steps = diff.steps();
        if steps.is_empty() {
            return Ok(Applied {
                steps: Vec::new(),
                pending: diff.pending(),
            });
        }
        let mut begin = Journal::record(&self.run, "begin");
        begin.plan = Some(plan.to_string());
        begin.checkpoint = Some(checkpoint.clone());
        self.journal.append(&begin)?;
        let mut created = BTreeMap::new();
        let mut skip = BTreeSet::new();
        let mut outcomes = Vec::new();
        let mut pending = diff.pending();
        for (i, step) in steps.iter().enumerate() {
            let n = i as u64 + 1;
            let result = if skip.contains(&step.gpu()) {
                "skipped: MIG mode change pending a GPU reset".to_string()
            } else {
                match run_step(ctrl, step, &mut created) {
                    Ok(Some(Activation::PendingReset)) => {
                        skip.insert(step.gpu());
                        let g = checkpoint.gpu(step.gpu());
                        let change = match step {
                            Step::SetMigMode { enabled: true, .. } => "enabling MIG",
                            _ => "disabling MIG",
                        };
                        if let Some(g) = g {
                            pending.push(reset_hint(g, change));
                        }
                        "pending-reset".to_string()
                    }
                    Ok(_) => "ok".to_string(),
                    Err(e) => {
                        self.log_step("step", n, step, checkpoint, &format!("error: {e}"))?;
                        let context = format!(
                            "step {n} ({}: {step}) failed: {e}",
                            target_of(step, checkpoint)
                        );
                        let mut r = Journal::record(&self.run, "rollback");
                        r.result = Some(context.clone());
                        self.journal.append(&r)?;
                        return match self.restore(ctrl, checkpoint, "rollback-step") {
                            Ok(_) => {
                                self.end(&self.run, "rolled-back")?;
                                Err(ApplyError::RolledBack {
                                    step: format!("{n} ({}: {step})", target_of(step, checkpoint)),
                                    error: e.to_string(),
                                    journal: self.journal.path().to_path_buf(),
                                })
                            }
                            Err(errors) => Err(ApplyError::RestoreIncomplete {
                                context,
                                errors,
                                journal: self.journal.path().to_path_buf(),
                            }),
                        };
                    }
                }
            };
            self.log_step("step", n, step, checkpoint, &result)?;
            outcomes.push(StepOutcome {
                step: step.clone(),
                result,
            });
            if self.abort_after_step == Some(n) {
                std::process::abort();
            }
        }
        // Assert: everything but the pending mode changes must match now.
        let after = ctrl.read_state()?;
        let check = self::diff(&after, targets)?;
        let left: Vec<&GpuDiff> = check
            .gpus
            .iter()
            .filter(|g| !g.steps.is_empty() && !skip.contains(&g.gpu))
            .collect();
        if !left.is_empty() {
            self.end(&self.run, "failed")?;
            return Err(ApplyError::StillDiffers(check.render()));
        }
        self.end(&self.run, "applied")?;
        pending.sort();
        pending.dedup();
        Ok(Applied {
            steps: outcomes,
            pending,
        })
    }
}

/// The node's current layout as a tessera plan with one config, `label`. GPUs whose model
/// tessera does not know are left out (listed in the returned warnings).
pub fn export_plan(state: &MigNodeState, label: &str) -> (MigPlanFile, Vec<String>) {
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
    let mut plan = MigPlanFile::new();
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

#[cfg(test)]
mod tests;
