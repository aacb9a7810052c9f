//! Targets: reading a plan of either format ([`read_plan`]: a tessera plan or an
//! nvidia-mig-parted v1 file) and turning the selected config into one [`GpuTarget`] per GPU of
//! this node ([`targets`]; mig-parted configs are placed largest first, keeping the current
//! placements when the profile mix is unchanged); a checkpoint as targets
//! ([`checkpoint_targets`]).
//!
//! It does not compare targets with the node ([`super::steps`]) nor change anything.

use std::collections::BTreeSet;
use std::path::Path;

use super::{ApplyError, GpuTarget, TargetInstance, model_of};
use crate::mig::LayoutInstance;
use crate::mig::control::{GpuMigState, MigNodeState};
use crate::mig::parted::{self, PartedFile};
use crate::mig::plan::{TesseraPlan, TesseraPlanError};
use crate::model::{GpuInfo, Inventory};

/// A plan file of either format.
// One value per command: boxing the larger variant would buy nothing.
#[derive(Debug, Clone)]
pub enum LayoutFile {
    Tessera(Box<TesseraPlan>),
    MigParted(PartedFile),
}

/// Read a plan: a tessera plan (it has `kind:`) or a mig-parted v1 file (it has `mig-configs:`).
pub fn read_plan(path: &Path) -> Result<LayoutFile, ApplyError> {
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
    // The format the file declares, read from its top-level keys line by line, so that a file
    // that does not parse (a duplicate key, a number out of range, two documents) gets the
    // errors of the kind it declares.
    let is_tessera = match declared_format(&text) {
        Some(tessera) => tessera,
        None => serde_yaml_ng::from_str::<serde_yaml_ng::Value>(&text)
            .ok()
            .and_then(|v| v.get("kind").cloned())
            .is_some(),
    };
    Ok(if is_tessera {
        LayoutFile::Tessera(Box::new(TesseraPlan::parse(&text, &source).map_err(
            |e| match e {
                TesseraPlanError::Parse { path, message } => TesseraPlanError::Parse {
                    path,
                    message: format!("not a valid tessera plan (it declares kind:): {message}"),
                },
                other => other,
            },
        )?))
    } else {
        LayoutFile::MigParted(PartedFile::parse(&text, &source)?)
    })
}

/// `Some(true)` when the text has a top-level `kind:` key (a tessera plan), `Some(false)` when
/// it has a top-level `mig-configs:` key (nvidia-mig-parted), `None` when neither is written
/// at the start of a line.
fn declared_format(text: &str) -> Option<bool> {
    let key = |line: &str, k: &str| {
        line.strip_prefix(k)
            .or_else(|| line.strip_prefix(&format!("\"{k}\"")))
            .or_else(|| line.strip_prefix(&format!("'{k}'")))
            .is_some_and(|rest| rest.trim_start().starts_with(':'))
    };
    let mut parted = false;
    for line in text.lines() {
        if key(line, "kind") {
            return Some(true);
        }
        parted |= key(line, "mig-configs");
    }
    parted.then_some(false)
}

/// Read a plan that another file names (a schedule's `plan:`): as [`read_plan`], but an error
/// never quotes the file: it names the file, the file that named it and what was expected. The
/// named file can be anything the naming file points at (a token, a key), and the error may
/// end up in a log that others read.
pub fn read_plan_named(path: &Path, by: &Path) -> Result<LayoutFile, ApplyError> {
    read_plan(path).map_err(|e| ApplyError::NamedPlan {
        path: path.to_path_buf(),
        by: by.to_path_buf(),
        what: match e {
            ApplyError::Read { error, .. } => error.to_string(),
            _ => "not a tessera plan (kind: tessera-plan or tessera-mig-plan) or an \
                  nvidia-mig-parted v1 file (mig-configs:)"
                .into(),
        },
    })
}

fn gpu_info(g: &GpuMigState) -> GpuInfo {
    GpuInfo {
        index: g.index,
        minor_number: None,
        uuid: g.uuid.clone(),
        name: g.name.clone(),
        pci_bus_id: String::new(),
        memory_total_bytes: None,
        power_limit_watts: None,
        mig_mode: g.mig_mode,
        mig_instances: Vec::new(),
    }
}

fn full(l: &LayoutInstance) -> TargetInstance {
    TargetInstance {
        profile_id: l.profile_id,
        placement: l.placement,
        compute: true,
    }
}

/// Config `label` of a mig-parted file, or its only config when `label` is `None`.
pub fn select_parted(
    f: &PartedFile,
    label: Option<&str>,
    source_name: &str,
) -> Result<parted::PartedConfig, ApplyError> {
    let label = match label {
        Some(l) => l.to_string(),
        None if f.configs.len() == 1 => f.configs.keys().next().cloned().unwrap_or_default(),
        None => {
            return Err(ApplyError::Plan(TesseraPlanError::AmbiguousLabel {
                path: source_name.into(),
                available: f.configs.keys().cloned().collect::<Vec<_>>().join(", "),
            }));
        }
    };
    Ok(f.select(&label)?)
}

/// The targets of config `label` (or the only config) of `plan` for this node; returns the
/// label chosen too. A config that names no GPU of this node is [`ApplyError::NoGpuOfNode`]:
/// asserting or applying it would check nothing.
pub fn targets(
    plan: &LayoutFile,
    label: Option<&str>,
    source_name: &str,
    state: &MigNodeState,
) -> Result<(String, Vec<GpuTarget>), ApplyError> {
    let (label, out) = targets_of(plan, label, source_name, state)?;
    if !out.is_empty() {
        return Ok((label, out));
    }
    let detail = match plan {
        LayoutFile::Tessera(p) => {
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
        LayoutFile::MigParted(_) => format!(
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
    plan: &LayoutFile,
    label: Option<&str>,
    source_name: &str,
    state: &MigNodeState,
) -> Result<(String, Vec<GpuTarget>), ApplyError> {
    match plan {
        LayoutFile::Tessera(p) => tessera_targets(p, label, source_name, state),
        LayoutFile::MigParted(f) => parted_targets(f, label, source_name, state),
    }
}

/// The targets of a tessera plan's config: each GPU of the config that applies to this node, on
/// a GPU that exists with the UUID (if given) and model the plan names.
fn tessera_targets(
    p: &TesseraPlan,
    label: Option<&str>,
    source_name: &str,
    state: &MigNodeState,
) -> Result<(String, Vec<GpuTarget>), ApplyError> {
    let target_err = |gpu: u32, message: String| ApplyError::Target {
        source_name: source_name.to_string(),
        gpu,
        message,
    };
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

/// The targets of a mig-parted config: the entry that selects each GPU of the node, its profile
/// counts placed on the GPU (the current placements kept when the profile mix is the same).
fn parted_targets(
    f: &PartedFile,
    label: Option<&str>,
    source_name: &str,
    state: &MigNodeState,
) -> Result<(String, Vec<GpuTarget>), ApplyError> {
    let target_err = |gpu: u32, message: String| ApplyError::Target {
        source_name: source_name.to_string(),
        gpu,
        message,
    };
    let plan = select_parted(f, label, source_name)?;
    let label = plan.label.clone();
    let inventory = Inventory {
        node: state.node.clone(),
        driver_version: None,
        cuda_version: None,
        gpus: state.gpus.iter().map(gpu_info).collect(),
    };
    plan.validate(&inventory)?;
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
        let model = model_of(g)
            .ok_or_else(|| target_err(g.index, "tessera has no MIG table for this model".into()))?;
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
