//! The diff of the node against its targets ([`diff`]) and the exact device calls that remove
//! the differences ([`Step`], in order, per GPU in [`GpuDiff`]): only differing instances are
//! destroyed or created, matching ones are left alone; a MIG mode change that a GPU reset must
//! complete is a *pending* note, not a step; processes in the way are listed as busy.
//!
//! It does not run the steps ([`super::execute`]).

use std::collections::BTreeSet;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::{ApplyError, GpuTarget, TargetInstance, model_of, profile_name};
use crate::mig::GpuModel;
use crate::mig::control::{GpuInstanceState, GpuMigState, MigNodeState};
use crate::model::{MigMode, Placement};

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

pub(super) fn at(p: &Placement) -> String {
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

pub(super) fn reset_hint(g: &GpuMigState, change: &str) -> String {
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
        if let Some(current) = diff_mode(g, t, mode, &mut d) {
            diff_instances(g, t, current, &mut d);
        }
        gpus.push(d);
    }
    Ok(Diff {
        node: state.node.clone(),
        gpus,
    })
}

/// The MIG mode of `g` against the target's: its differences, the mode step or the note that a
/// GPU reset is pending, the processes a mode change would stop. Returns the instances to
/// compare with the target's (none while MIG is off) when they can be changed now, `None` when
/// they cannot (a mode change awaits a reset, or MIG stays off).
fn diff_mode<'g>(
    g: &'g GpuMigState,
    t: &GpuTarget,
    mode: MigMode,
    d: &mut GpuDiff,
) -> Option<&'g [GpuInstanceState]> {
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
    instances_changeable.then_some(current)
}

/// The instances `current` of `g` against the target's (none when the target disables MIG):
/// each current one kept, fixed or destroyed ([`diff_current_instance`]), the missing ones
/// created, largest first, then MIG disabled when the target wants it off.
fn diff_instances(g: &GpuMigState, t: &GpuTarget, current: &[GpuInstanceState], d: &mut GpuDiff) {
    let model = model_of(g);
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
        diff_current_instance(g, model, i, want, &want_keys, d);
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

/// One current instance `i` of `g`: one the target wants (`want_keys`) keeps its GPU instance,
/// its compute instance created or destroyed to match; any other is destroyed (its compute
/// instances first), its processes listed as busy.
fn diff_current_instance(
    g: &GpuMigState,
    model: Option<&'static GpuModel>,
    i: &GpuInstanceState,
    want: &[TargetInstance],
    want_keys: &BTreeSet<(u32, Placement)>,
    d: &mut GpuDiff,
) {
    let name = profile_name(model, i.profile_id);
    if want_keys.contains(&(i.profile_id, i.placement)) {
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
        return;
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
