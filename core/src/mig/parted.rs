//! The node's planned MIG layout, in nvidia-mig-parted's declarative format (`version: v1`), and
//! the comparison of the GPUs' actual layout with it ("drift", `tessera_mig_layout_drift`).
//!
//! The format is the one `nvidia-mig-parted apply -f FILE -c LABEL` and the GPU Operator's MIG
//! manager read:
//!
//! ```yaml
//! version: v1
//! mig-configs:
//!   inference-node:                      # a label: what --mig.config-label selects
//!     - devices: [0, 1]                  # "all" or GPU indices
//!       mig-enabled: false
//!     - device-filter: ["0x233010DE"]    # optional: PCI device ids (device << 16 | vendor)
//!       devices: all
//!       mig-enabled: true
//!       mig-devices: { "3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1 }
//! ```
//!
//! Parsing is strict: unknown keys, a missing `devices` or `mig-enabled`, `mig-devices` on a
//! MIG-disabled entry, a malformed profile name or device id all fail with the file, the YAML
//! path and (for syntax and type errors) the line and column. Compute-instance profiles
//! (`1c.3g.40gb`) are rejected: tessera models one compute instance per GPU instance.
//!
//! Semantics follow mig-parted's: an entry applies to every GPU whose index it lists (or all) and,
//! with a `device-filter`, whose PCI device id is listed. A GPU no entry selects has no plan (no
//! drift series). Two entries that select the same GPU must agree. [`MigPlan::check`] validates a
//! plan against a node's inventory (profile names of the GPU's model, MIG support, whether the
//! instances fit); [`MigPlan::drift`] compares MIG mode and the count of GPU instances per profile
//! (placements are not compared: mig-parted does not specify them either).
//!
//! Files larger than [`input_limits::MAX_YAML_BYTES`] or nested deeper than
//! [`input_limits::MAX_YAML_DEPTH`] are refused before they are parsed ([`MigConfigError::Limit`],
//! with line and column), as are `mig-devices` asking for more than [`MAX_GPU_INSTANCES`] GPU
//! instances and `devices` lists longer than [`MAX_DEVICE_INDICES`].
//!
//! PCI device ids come from tessera's model table ([`crate::mig::GpuModel::pci_device_id`]), keyed
//! by the product name NVML reports; a GPU of another model cannot be matched by a
//! `device-filter` and has no profile names tessera knows, so [`MigPlan::check`] rejects plans
//! that need either for it.
//!
//! This module is pure: it reads the file it is given and never calls NVML.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::{self, Deserializer, SeqAccess, Visitor};

use crate::input_limits;
use crate::mig::{self, GpuModel, LayoutInstance};
use crate::model::{GpuInfo, Inventory, Placement};

/// Errors reading, parsing or checking a MIG configuration.
#[derive(Debug, thiserror::Error)]
pub enum MigConfigError {
    #[error("cannot read MIG config {path}: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    /// YAML syntax or a value of the wrong type; `message` carries the YAML path, line and column.
    #[error("MIG config {path}: {message}")]
    Parse { path: String, message: String },
    /// A value that parsed but is not valid nvidia-mig-parted v1.
    #[error("MIG config {path}: {item}: {message}")]
    Invalid {
        path: String,
        item: String,
        message: String,
    },
    /// The label given to --mig.config-label is not in the file.
    #[error("MIG config {path}: no config labelled {label:?}; the file has: {available}")]
    NoLabel {
        path: String,
        label: String,
        available: String,
    },
    /// Larger or deeper than [`input_limits`] allows (see docs/mig.md).
    #[error("MIG config {path}: {limit}")]
    Limit {
        path: String,
        limit: input_limits::LimitError,
    },
    /// The selected config cannot be checked on, or does not fit, one of the node's GPUs.
    #[error("MIG config {path}, config {label:?}: GPU {gpu} ({name}): {message}")]
    Gpu {
        path: String,
        label: String,
        gpu: u32,
        name: String,
        message: String,
    },
}

/// Most GPU instances a GPU holds (seven `1g` instances; no MIG profile table allows more): a
/// larger `mig-devices` count or sum is refused when the file is parsed.
pub const MAX_GPU_INSTANCES: u32 = 7;

/// Longest `devices` list of GPU indices (each missing index is one warning at start).
pub const MAX_DEVICE_INDICES: usize = 64;

/// Which GPUs an entry applies to (mig-parted's `devices`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Devices {
    /// `devices: all`.
    All,
    /// `devices: [0, 1]`: NVML indices.
    Indices(Vec<u32>),
}

impl<'de> Deserialize<'de> for Devices {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Devices;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("\"all\" or a list of GPU indices such as [0, 1]")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Devices, E> {
                if s == "all" {
                    Ok(Devices::All)
                } else {
                    Err(E::invalid_value(de::Unexpected::Str(s), &self))
                }
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Devices, A::Error> {
                let mut out = Vec::new();
                while let Some(i) = seq.next_element::<u32>()? {
                    out.push(i);
                }
                Ok(Devices::Indices(out))
            }
        }
        d.deserialize_any(V)
    }
}

/// `device-filter`: one string or a list of strings.
struct StringOrList(Vec<String>);

impl<'de> Deserialize<'de> for StringOrList {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = StringOrList;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a PCI device id such as \"0x233010DE\" or a list of them")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<StringOrList, E> {
                Ok(StringOrList(vec![s.to_string()]))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<StringOrList, A::Error> {
                let mut out = Vec::new();
                while let Some(s) = seq.next_element::<String>()? {
                    out.push(s);
                }
                Ok(StringOrList(out))
            }
        }
        d.deserialize_any(V)
    }
}

/// A YAML mapping whose duplicate keys are an error (serde's maps keep the last silently).
struct UniqueMap<V>(BTreeMap<String, V>);

impl<'de, V: Deserialize<'de>> Deserialize<'de> for UniqueMap<V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Vis<V>(std::marker::PhantomData<V>);
        impl<'de, V: Deserialize<'de>> Visitor<'de> for Vis<V> {
            type Value = UniqueMap<V>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping")
            }
            fn visit_map<A: de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<UniqueMap<V>, A::Error> {
                let mut out = BTreeMap::new();
                while let Some(k) = map.next_key::<String>()? {
                    if out.contains_key(&k) {
                        return Err(de::Error::custom(format!("duplicate key {k:?}")));
                    }
                    let v = map.next_value()?;
                    out.insert(k, v);
                }
                Ok(UniqueMap(out))
            }
        }
        d.deserialize_map(Vis(std::marker::PhantomData))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    version: String,
    #[serde(rename = "mig-configs")]
    mig_configs: UniqueMap<Vec<RawEntry>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    #[serde(rename = "device-filter", default)]
    device_filter: Option<StringOrList>,
    devices: Devices,
    #[serde(rename = "mig-enabled")]
    mig_enabled: bool,
    #[serde(rename = "mig-devices", default)]
    mig_devices: Option<UniqueMap<u32>>,
}

/// One entry of a config: which GPUs, MIG on or off, and how many GPU instances of each profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigConfigEntry {
    /// PCI device ids (`0x233010DE`); empty = any device.
    pub device_filter: Vec<u32>,
    pub devices: Devices,
    pub mig_enabled: bool,
    /// GPU instances per profile name (`1g.10gb` → 7); zero counts are dropped.
    pub mig_devices: BTreeMap<String, u32>,
}

impl MigConfigEntry {
    /// Whether the entry selects GPU `gpu`. `Err` when it has a device filter and the GPU's
    /// PCI device id is unknown (a model tessera has no table for).
    fn selects(&self, gpu: &GpuInfo) -> Result<bool, String> {
        let by_index = match &self.devices {
            Devices::All => true,
            Devices::Indices(v) => v.contains(&gpu.index),
        };
        if !by_index || self.device_filter.is_empty() {
            return Ok(by_index);
        }
        match mig::model_by_nvml_name(&gpu.name) {
            Some(m) => Ok(self.device_filter.contains(&m.pci_device_id)),
            None => Err(format!(
                "its PCI device id is unknown to tessera (not one of its GPU models), so a device-filter cannot be matched; use devices: [{}] without a device-filter",
                gpu.index
            )),
        }
    }

    /// Whether two entries ask for the same thing.
    fn same_layout(&self, other: &MigConfigEntry) -> bool {
        self.mig_enabled == other.mig_enabled && self.mig_devices == other.mig_devices
    }
}

/// A parsed mig-parted v1 file: every config, by label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigConfigFile {
    /// Where it was read from (for messages).
    pub source: String,
    pub configs: BTreeMap<String, Vec<MigConfigEntry>>,
}

/// Parse a PCI device id as mig-parted does (`0x` + hex, fitting in 32 bits).
fn parse_device_id(s: &str) -> Option<u32> {
    let hex = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X"))?;
    if hex.is_empty() || hex.len() > 8 {
        return None;
    }
    u32::from_str_radix(hex, 16).ok()
}

/// Check a GPU-instance profile name: `<G>g.<M>gb` with an optional attribute suffix
/// (`+me`, `+gfx`, `-me`, `+me.all`).
fn check_profile_name(name: &str) -> Result<(), String> {
    let expected = "expected a GPU instance profile such as 1g.10gb, 3g.40gb or 1g.10gb+me";
    let parts: Vec<&str> = name.splitn(3, '.').collect();
    if parts.len() >= 2
        && parts[0].ends_with('c')
        && parts[0][..parts[0].len() - 1]
            .chars()
            .all(|c| c.is_ascii_digit())
        && !parts[0].is_empty()
        && parts[0].len() > 1
    {
        return Err(format!(
            "{name:?} names a compute-instance profile; tessera plans one compute instance per GPU instance, so use the GPU instance profile ({}) instead",
            name.split_once('.').map_or(name, |(_, rest)| rest)
        ));
    }
    let Some((g, rest)) = name.split_once("g.") else {
        return Err(format!("bad profile name {name:?}: {expected}"));
    };
    let digits_end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    let (mem, tail) = rest.split_at(digits_end);
    let suffix = tail.strip_prefix("gb");
    let ok = !g.is_empty()
        && g.chars().all(|c| c.is_ascii_digit())
        && !mem.is_empty()
        && suffix.is_some_and(|s| {
            s.is_empty()
                || ((s.starts_with('+') || s.starts_with('-'))
                    && s.len() > 1
                    && s[1..]
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.'))
        });
    if ok {
        Ok(())
    } else {
        Err(format!("bad profile name {name:?}: {expected}"))
    }
}

impl MigConfigFile {
    /// Read and parse `path` (at most [`input_limits::MAX_YAML_BYTES`] of it).
    pub fn from_file(path: &Path) -> Result<MigConfigFile, MigConfigError> {
        let text = input_limits::read_to_string(path, input_limits::MAX_YAML_BYTES).map_err(
            |e| match e {
                input_limits::ReadError::Io(error) => MigConfigError::Read {
                    path: path.to_path_buf(),
                    error,
                },
                input_limits::ReadError::Limit(limit) => MigConfigError::Limit {
                    path: path.display().to_string(),
                    limit,
                },
            },
        )?;
        MigConfigFile::parse(&text, &path.display().to_string())
    }

    /// Parse the text of a mig-parted v1 file; `source` names it in errors. Its size and depth
    /// are checked against [`input_limits`] first.
    pub fn parse(text: &str, source: &str) -> Result<MigConfigFile, MigConfigError> {
        input_limits::check_yaml(text).map_err(|limit| MigConfigError::Limit {
            path: source.to_string(),
            limit,
        })?;
        let raw: RawFile = serde_yaml_ng::from_str(text).map_err(|e| MigConfigError::Parse {
            path: source.to_string(),
            message: input_limits::yaml_error(&e),
        })?;
        let invalid = |item: String, message: String| MigConfigError::Invalid {
            path: source.to_string(),
            item,
            message,
        };
        if raw.version != "v1" {
            return Err(invalid(
                "version".into(),
                format!(
                    "unsupported version {:?}; expected \"v1\" (nvidia-mig-parted's format)",
                    raw.version
                ),
            ));
        }
        if raw.mig_configs.0.is_empty() {
            return Err(invalid(
                "mig-configs".into(),
                "at least one config is required".into(),
            ));
        }
        let mut configs = BTreeMap::new();
        for (label, entries) in raw.mig_configs.0 {
            if entries.is_empty() {
                return Err(invalid(
                    format!("mig-configs.{label}"),
                    "at least one entry is required".into(),
                ));
            }
            let mut out = Vec::with_capacity(entries.len());
            for (i, e) in entries.into_iter().enumerate() {
                let item = format!("mig-configs.{label}[{i}]");
                let mut device_filter = Vec::new();
                for s in e.device_filter.map(|f| f.0).unwrap_or_default() {
                    device_filter.push(parse_device_id(&s).ok_or_else(|| {
                        invalid(
                            format!("{item}.device-filter"),
                            format!(
                                "bad PCI device id {s:?}: expected 0x and up to 8 hex digits, e.g. \"0x233010DE\""
                            ),
                        )
                    })?);
                }
                let mig_devices = match (e.mig_enabled, e.mig_devices.map(|m| m.0)) {
                    (true, None) => {
                        return Err(invalid(
                            item,
                            "mig-devices is required when mig-enabled is true (use {} for no instances)"
                                .into(),
                        ));
                    }
                    (false, Some(d)) if !d.is_empty() => {
                        return Err(invalid(
                            format!("{item}.mig-devices"),
                            "MIG devices given while mig-enabled is false".into(),
                        ));
                    }
                    (_, d) => d.unwrap_or_default(),
                };
                for name in mig_devices.keys() {
                    check_profile_name(name)
                        .map_err(|m| invalid(format!("{item}.mig-devices"), m))?;
                }
                // Counts are expanded into lists of instances later: bound them here.
                let mut total = 0u64;
                for (name, count) in &mig_devices {
                    if *count > MAX_GPU_INSTANCES {
                        return Err(invalid(
                            format!("{item}.mig-devices"),
                            format!(
                                "{count} × {name:?}; expected at most {MAX_GPU_INSTANCES} GPU instances on a GPU"
                            ),
                        ));
                    }
                    total += *count as u64;
                }
                if total > MAX_GPU_INSTANCES as u64 {
                    return Err(invalid(
                        format!("{item}.mig-devices"),
                        format!(
                            "{total} GPU instances; expected at most {MAX_GPU_INSTANCES} on a GPU"
                        ),
                    ));
                }
                if let Devices::Indices(v) = &e.devices
                    && v.len() > MAX_DEVICE_INDICES
                {
                    return Err(invalid(
                        format!("{item}.devices"),
                        format!(
                            "{} GPU indices; expected at most {MAX_DEVICE_INDICES}",
                            v.len()
                        ),
                    ));
                }
                out.push(MigConfigEntry {
                    device_filter,
                    devices: e.devices,
                    mig_enabled: e.mig_enabled,
                    mig_devices: mig_devices.into_iter().filter(|(_, n)| *n > 0).collect(),
                });
            }
            configs.insert(label, out);
        }
        Ok(MigConfigFile {
            source: source.to_string(),
            configs,
        })
    }

    /// The config labelled `label` (what `nvidia-mig-parted apply -c LABEL` would apply).
    pub fn select(&self, label: &str) -> Result<MigPlan, MigConfigError> {
        let entries = self
            .configs
            .get(label)
            .ok_or_else(|| MigConfigError::NoLabel {
                path: self.source.clone(),
                label: label.to_string(),
                available: self.configs.keys().cloned().collect::<Vec<_>>().join(", "),
            })?;
        Ok(MigPlan {
            source: self.source.clone(),
            label: label.to_string(),
            entries: entries.clone(),
        })
    }
}

/// The selected config: what the node's MIG layout should be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigPlan {
    /// The file it came from.
    pub source: String,
    /// Its label (the `config` label of the drift metrics).
    pub label: String,
    pub entries: Vec<MigConfigEntry>,
}

/// How one GPU compares with the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuDrift {
    pub index: u32,
    pub uuid: String,
    /// Whether MIG mode or the GPU instances per profile differ from the plan.
    pub drifted: bool,
    /// GPU instances to create or destroy to match the plan (sum over profiles of the
    /// difference in count; a MIG mode that differs counts every instance of the side that has
    /// them).
    pub differing_instances: u32,
}

/// The GPU's current GPU instances per profile name (one per GPU instance, whatever its compute
/// instances).
fn actual_counts(gpu: &GpuInfo) -> BTreeMap<String, u32> {
    let mut seen = std::collections::BTreeSet::new();
    let mut out = BTreeMap::new();
    for m in &gpu.mig_instances {
        if seen.insert(m.gpu_instance_id) {
            *out.entry(m.profile_name.clone()).or_insert(0) += 1;
        }
    }
    out
}

/// Whether `profiles` (ids, with repetition) can be placed together on `model`.
fn fits(model: &GpuModel, profiles: &[u32]) -> Result<(), String> {
    place(model, profiles).map(|_| ())
}

/// Explicit placements for `profiles` (ids, with repetition) on `model`, searched largest first
/// (the order in which they must be created); `Err` says why none exists.
pub fn place(model: &GpuModel, profiles: &[u32]) -> Result<Vec<LayoutInstance>, String> {
    fn search(
        model: &GpuModel,
        rest: &[u32],
        chosen: &mut Vec<LayoutInstance>,
    ) -> Option<Vec<LayoutInstance>> {
        let Some((&id, rest)) = rest.split_first() else {
            return mig::check_layout(model, chosen)
                .is_ok()
                .then(|| chosen.clone());
        };
        let p = model.profile(id)?;
        for start in &p.placement_starts {
            let placement = Placement {
                start: *start,
                size: p.memory_slices,
            };
            if chosen.iter().any(|c| c.placement.overlaps(&placement)) {
                continue;
            }
            chosen.push(LayoutInstance {
                profile_id: id,
                placement,
            });
            if let Some(found) = search(model, rest, chosen) {
                return Some(found);
            }
            chosen.pop();
        }
        None
    }
    // Quick rule checks first (max counts, +me, compute slices), with a clear message.
    let mut sorted: Vec<u32> = profiles.to_vec();
    for p in &model.profiles {
        let n = sorted.iter().filter(|&&id| id == p.id).count() as u32;
        if n > p.max_count {
            return Err(format!(
                "{n} × {} exceed its maximum of {} per GPU",
                p.name, p.max_count
            ));
        }
    }
    let compute: u32 = sorted
        .iter()
        .filter_map(|id| model.profile(*id))
        .map(|p| p.compute_slices)
        .sum();
    if compute > model.compute_slices {
        return Err(format!(
            "the instances need {compute} compute slices; {} has {}",
            model.key, model.compute_slices
        ));
    }
    // Largest first: fewer dead ends.
    sorted.sort_by_key(|id| std::cmp::Reverse(model.profile(*id).map_or(0, |p| p.memory_slices)));
    match search(model, &sorted, &mut Vec::new()) {
        Some(found) => Ok(found),
        None => Err(format!(
            "no placement of these instances exists on {} (memory slices overlap or a rule is broken)",
            model.key
        )),
    }
}

impl MigPlan {
    /// The entry that applies to `gpu`, if any. `Err` when entries that select it disagree, or
    /// a device filter cannot be matched.
    pub fn entry_for(&self, gpu: &GpuInfo) -> Result<Option<&MigConfigEntry>, String> {
        let mut found: Option<(usize, &MigConfigEntry)> = None;
        for (i, e) in self.entries.iter().enumerate() {
            if !e.selects(gpu)? {
                continue;
            }
            if let Some((j, prev)) = found
                && !prev.same_layout(e)
            {
                return Err(format!(
                    "entries {j} and {i} of config {:?} both select it and ask for different layouts",
                    self.label
                ));
            }
            found = Some((i, e));
        }
        Ok(found.map(|(_, e)| e))
    }

    /// Check the plan against the node's GPUs: every GPU it selects must support what it asks
    /// (MIG, profile names of the GPU's model, instances that fit). Returns warnings for
    /// device indices that name no GPU on this node.
    pub fn check(&self, inventory: &Inventory) -> Result<Vec<String>, MigConfigError> {
        let err = |gpu: &GpuInfo, message: String| MigConfigError::Gpu {
            path: self.source.clone(),
            label: self.label.clone(),
            gpu: gpu.index,
            name: gpu.name.clone(),
            message,
        };
        for gpu in &inventory.gpus {
            let Some(entry) = self.entry_for(gpu).map_err(|m| err(gpu, m))? else {
                continue;
            };
            if !entry.mig_enabled {
                continue;
            }
            let Some(model) = mig::model_by_nvml_name(&gpu.name) else {
                return Err(err(
                    gpu,
                    "tessera has no MIG profile table for this model, so it cannot check a MIG layout on it"
                        .into(),
                ));
            };
            if !model.supports_mig() {
                return Err(err(
                    gpu,
                    format!(
                        "{} does not support MIG, but the config enables it",
                        model.key
                    ),
                ));
            }
            let mut ids = Vec::new();
            for (name, count) in &entry.mig_devices {
                let Some(p) = model.profile_by_name(name) else {
                    return Err(err(
                        gpu,
                        format!(
                            "profile {name:?} does not exist on {}; its profiles are {}",
                            model.key,
                            model
                                .profiles
                                .iter()
                                .map(|p| p.name.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    ));
                };
                if *count > p.max_count {
                    return Err(err(
                        gpu,
                        format!(
                            "{count} × {} exceed its maximum of {} per GPU",
                            p.name, p.max_count
                        ),
                    ));
                }
                ids.extend(std::iter::repeat_n(p.id, *count as usize));
            }
            fits(model, &ids).map_err(|m| err(gpu, m))?;
        }
        let mut warnings = Vec::new();
        for (i, e) in self.entries.iter().enumerate() {
            if let Devices::Indices(v) = &e.devices {
                for d in v {
                    if !inventory.gpus.iter().any(|g| g.index == *d) {
                        warnings.push(format!(
                            "MIG config {}, config {:?}, entry {i}: device {d} does not exist on this node ({} GPUs); ignored",
                            self.source,
                            self.label,
                            inventory.gpus.len()
                        ));
                    }
                }
            }
        }
        Ok(warnings)
    }

    /// Compare every GPU the plan selects with it. GPUs without a plan, or that cannot be
    /// matched (unknown model with a device filter, conflicting entries, unreadable identity),
    /// are left out: no series rather than a guess.
    pub fn drift(&self, inventory: &Inventory) -> Vec<GpuDrift> {
        let mut out = Vec::new();
        for gpu in &inventory.gpus {
            if gpu.name.is_empty() {
                continue;
            }
            let Ok(Some(entry)) = self.entry_for(gpu) else {
                continue;
            };
            let enabled = gpu.mig_mode.is_some_and(|m| m.current);
            let actual = actual_counts(gpu);
            let differing = match (entry.mig_enabled, enabled) {
                (true, true) => {
                    let mut names: std::collections::BTreeSet<&String> =
                        entry.mig_devices.keys().collect();
                    names.extend(actual.keys());
                    names
                        .into_iter()
                        .map(|n| {
                            let want = entry.mig_devices.get(n).copied().unwrap_or(0);
                            let have = actual.get(n).copied().unwrap_or(0);
                            want.abs_diff(have)
                        })
                        .sum()
                }
                (true, false) => entry.mig_devices.values().sum(),
                (false, true) => actual.values().sum(),
                (false, false) => 0,
            };
            out.push(GpuDrift {
                index: gpu.index,
                uuid: gpu.uuid.clone(),
                drifted: entry.mig_enabled != enabled || differing > 0,
                differing_instances: differing,
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{MigInstanceInfo, MigMode};

    const GOOD: &str = r#"
version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  balanced:
    - device-filter: ["0x233010DE", "0x20B210DE"]
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb": 2
        "2g.20gb": 1
        "3g.40gb": 1
    - device-filter: "0x20B010DE"
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.5gb": 2
        "2g.10gb": 1
        "3g.20gb": 1
  custom:
    - devices: [0, 1]
      mig-enabled: false
    - devices: [2]
      mig-enabled: true
      mig-devices: { "3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1, "4g.40gb": 0 }
    - devices: [3]
      mig-enabled: true
      mig-devices: {}
"#;

    fn parse(text: &str) -> Result<MigConfigFile, MigConfigError> {
        MigConfigFile::parse(text, "test.yaml")
    }

    fn err(text: &str) -> String {
        parse(text).expect_err("must fail").to_string()
    }

    fn gpu(index: u32, model: &str, layout: &[(&str, u32)]) -> GpuInfo {
        let m = mig::model(model).unwrap();
        GpuInfo {
            index,
            uuid: format!("GPU-{index}"),
            name: m.nvml_name.into(),
            pci_bus_id: String::new(),
            memory_total_bytes: Some(m.memory_total_bytes),
            power_limit_watts: None,
            mig_mode: Some(MigMode {
                current: !layout.is_empty(),
                pending: !layout.is_empty(),
            }),
            mig_instances: layout
                .iter()
                .enumerate()
                .map(|(i, (name, start))| {
                    let p = m.profile_by_name(name).unwrap();
                    MigInstanceInfo {
                        gpu_instance_id: i as u32 + 1,
                        compute_instance_id: 0,
                        profile_id: p.id,
                        profile_name: p.name.clone(),
                        placement: Placement {
                            start: *start,
                            size: p.memory_slices,
                        },
                        uuid: format!("MIG-{index}-{i}"),
                        memory_total_bytes: None,
                    }
                })
                .collect(),
        }
    }

    fn node(gpus: Vec<GpuInfo>) -> Inventory {
        Inventory {
            node: "n".into(),
            driver_version: None,
            cuda_version: None,
            gpus,
        }
    }

    #[test]
    fn parses_the_mig_parted_format() {
        let f = parse(GOOD).unwrap();
        assert_eq!(f.configs.len(), 3);
        let b = &f.configs["balanced"];
        assert_eq!(b[0].device_filter, vec![0x2330_10DE, 0x20B2_10DE]);
        assert_eq!(b[1].device_filter, vec![0x20B0_10DE]);
        assert_eq!(b[0].mig_devices["1g.10gb"], 2);
        let c = &f.configs["custom"];
        assert_eq!(c[0].devices, Devices::Indices(vec![0, 1]));
        assert!(
            !c[1].mig_devices.contains_key("4g.40gb"),
            "zero counts dropped"
        );
        assert!(c[2].mig_enabled && c[2].mig_devices.is_empty());
    }

    #[test]
    fn bad_files_fail_with_where_and_what() {
        let e =
            err("version: v2\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: false\n");
        assert!(
            e.contains("test.yaml") && e.contains("version") && e.contains("v1"),
            "{e}"
        );
        let e = err(
            "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: false\n      colour: red\n",
        );
        assert!(
            e.contains("unknown field `colour`") && e.contains("line 6"),
            "{e}"
        );
        let e =
            err("version: v1\nmig-configs:\n  a:\n    - devices: some\n      mig-enabled: false\n");
        assert!(
            e.contains("\"all\" or a list of GPU indices") && e.contains("line 4"),
            "{e}"
        );
        let e = err("version: v1\nmig-configs:\n  a:\n    - devices: all\n");
        assert!(e.contains("mig-enabled"), "{e}");
        let e =
            err("version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: true\n");
        assert!(
            e.contains("mig-configs.a[0]") && e.contains("mig-devices is required"),
            "{e}"
        );
        let e = err(
            "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: false\n      mig-devices: {\"1g.10gb\": 1}\n",
        );
        assert!(e.contains("mig-enabled is false"), "{e}");
        let e = err(
            "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {\"1c.3g.40gb\": 1}\n",
        );
        assert!(
            e.contains("compute-instance profile") && e.contains("3g.40gb"),
            "{e}"
        );
        let e = err(
            "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {\"big\": 1}\n",
        );
        assert!(e.contains("bad profile name \"big\""), "{e}");
        let e = err(
            "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {\"1g.10gb\": -1}\n",
        );
        assert!(e.contains("line 6"), "{e}");
        let e = err(
            "version: v1\nmig-configs:\n  a:\n    - device-filter: H100\n      devices: all\n      mig-enabled: false\n",
        );
        assert!(e.contains("device-filter") && e.contains("\"H100\""), "{e}");
        let e = err("version: v1\nmig-configs:\n  a: []\n");
        assert!(
            e.contains("mig-configs.a") && e.contains("at least one entry"),
            "{e}"
        );
        let e = err("version: v1\nmig-configs: {}\n");
        assert!(e.contains("at least one config"), "{e}");
        let e = err("version: v1\n");
        assert!(e.contains("mig-configs"), "{e}");
        let e = err(
            "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: false\n  a:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {}\n",
        );
        assert!(
            e.contains("duplicate key \"a\"") && e.contains("line"),
            "{e}"
        );
        let e = err(
            "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {\"1g.10gb\": 1, \"1g.10gb\": 2}\n",
        );
        assert!(e.contains("duplicate key \"1g.10gb\""), "{e}");
        assert!(err("{").contains("test.yaml"));
        let missing = parse(GOOD).unwrap().select("nope").unwrap_err().to_string();
        assert!(
            missing.contains("\"nope\"") && missing.contains("all-disabled, balanced, custom"),
            "{missing}"
        );
    }

    #[test]
    fn profile_names() {
        for ok in [
            "1g.10gb",
            "7g.141gb",
            "1g.10gb+me",
            "1g.24gb+me.all",
            "1g.24gb-me",
        ] {
            check_profile_name(ok).unwrap();
        }
        for bad in [
            "1g10gb", "g.10gb", "1g.gb", "1g.10", "1g.10gb+", "1g.10gbx", "x1g.10gb",
        ] {
            assert!(check_profile_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn device_filter_and_indices_select_gpus() {
        let f = parse(GOOD).unwrap();
        let plan = f.select("balanced").unwrap();
        let h100 = gpu(0, "H100-80GB", &[]);
        let a40 = gpu(1, "A100-40GB", &[]);
        let h200 = gpu(2, "H200-141GB", &[]);
        assert_eq!(
            plan.entry_for(&h100).unwrap().unwrap().mig_devices["3g.40gb"],
            1
        );
        assert_eq!(
            plan.entry_for(&a40).unwrap().unwrap().mig_devices["3g.20gb"],
            1
        );
        assert!(
            plan.entry_for(&h200).unwrap().is_none(),
            "not in any filter"
        );
        let mut unknown = h100.clone();
        unknown.name = "NVIDIA A100 80GB PCIe".into();
        assert!(
            plan.entry_for(&unknown)
                .unwrap_err()
                .contains("device-filter")
        );
        let custom = f.select("custom").unwrap();
        assert!(!custom.entry_for(&h100).unwrap().unwrap().mig_enabled);
        let conflict = parse(
            "version: v1\nmig-configs:\n  c:\n    - devices: all\n      mig-enabled: false\n    - devices: [1]\n      mig-enabled: true\n      mig-devices: {}\n",
        )
        .unwrap()
        .select("c")
        .unwrap();
        assert!(conflict.entry_for(&h100).unwrap().is_some());
        assert!(
            conflict
                .entry_for(&a40)
                .unwrap_err()
                .contains("entries 0 and 1")
        );
    }

    #[test]
    fn check_rejects_what_a_gpu_cannot_do() {
        let f = parse(GOOD).unwrap();
        let inv = node(vec![
            gpu(0, "H100-80GB", &[]),
            gpu(1, "H100-80GB", &[]),
            gpu(2, "H100-80GB", &[]),
            gpu(3, "H100-80GB", &[]),
        ]);
        assert!(f.select("custom").unwrap().check(&inv).unwrap().is_empty());
        assert!(
            f.select("balanced")
                .unwrap()
                .check(&inv)
                .unwrap()
                .is_empty()
        );
        // A100-40GB names on an H100.
        let wrong = parse("version: v1\nmig-configs:\n  c:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {\"1g.5gb\": 7}\n").unwrap();
        let e = wrong
            .select("c")
            .unwrap()
            .check(&inv)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("GPU 0 (NVIDIA H100 80GB HBM3)")
                && e.contains("\"1g.5gb\" does not exist on H100-80GB")
                && e.contains("1g.10gb"),
            "{e}"
        );
        // Eight instances are refused when the file is parsed; 3 + 3 + 2 compute slices here.
        let too_many = parse("version: v1\nmig-configs:\n  c:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {\"3g.40gb\": 2, \"2g.20gb\": 1}\n").unwrap();
        let e = too_many
            .select("c")
            .unwrap()
            .check(&inv)
            .unwrap_err()
            .to_string();
        assert!(e.contains("compute slices"), "{e}");
        // Within compute slices (3 + 3 + 1) and max counts, but 4 + 4 + 2 memory slots > 8.
        let no_room = parse("version: v1\nmig-configs:\n  c:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {\"3g.40gb\": 2, \"1g.20gb\": 1}\n").unwrap();
        let e = no_room
            .select("c")
            .unwrap()
            .check(&inv)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no placement"), "{e}");
        let fits = parse("version: v1\nmig-configs:\n  c:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {\"4g.40gb\": 1, \"2g.20gb\": 1, \"1g.20gb\": 1}\n").unwrap();
        fits.select("c").unwrap().check(&inv).unwrap();
        // 4g.40gb + 2g.20gb + 1g.20gb: 4g at 0, 2g at 4, 1g.20gb at 6.
        let mut unknown = node(vec![gpu(0, "H100-80GB", &[])]);
        unknown.gpus[0].name = "NVIDIA Future GPU".into();
        let e = wrong
            .select("c")
            .unwrap()
            .check(&unknown)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no MIG profile table"), "{e}");
        let warnings = f
            .select("custom")
            .unwrap()
            .check(&node(vec![
                gpu(0, "H100-80GB", &[]),
                gpu(1, "H100-80GB", &[]),
            ]))
            .unwrap();
        assert_eq!(
            warnings.len(),
            2,
            "devices 2 and 3 do not exist: {warnings:?}"
        );
    }

    #[test]
    fn drift_compares_mode_and_instance_counts() {
        let f = parse(GOOD).unwrap();
        let plan = f.select("custom").unwrap();
        let inv = node(vec![
            gpu(0, "H100-80GB", &[]),
            // Plan: MIG off; actual: two instances.
            gpu(1, "H100-80GB", &[("3g.40gb", 0), ("3g.40gb", 4)]),
            // Plan: 3g + 2g + 1g; actual: the same.
            gpu(
                2,
                "H100-80GB",
                &[("1g.10gb", 6), ("3g.40gb", 0), ("2g.20gb", 4)],
            ),
            // Plan: MIG on, no instances; actual: MIG off.
            gpu(3, "H100-80GB", &[]),
            // No entry selects GPU 4.
            gpu(4, "H100-80GB", &[]),
        ]);
        let d = plan.drift(&inv);
        let by: BTreeMap<u32, (bool, u32)> = d
            .iter()
            .map(|g| (g.index, (g.drifted, g.differing_instances)))
            .collect();
        assert_eq!(by[&0], (false, 0));
        assert_eq!(by[&1], (true, 2));
        assert_eq!(by[&2], (false, 0));
        assert_eq!(by[&3], (true, 0));
        assert!(!by.contains_key(&4));
        // Same mode, different counts: 3g + 2g + 1g planned, 7 × 1g present: six 1g too many,
        // one 3g and one 2g missing.
        let seven: Vec<(&str, u32)> = (0..7).map(|s| ("1g.10gb", s)).collect();
        let d = plan.drift(&node(vec![gpu(2, "H100-80GB", &seven)]));
        assert_eq!((d[0].drifted, d[0].differing_instances), (true, 8));
    }
}
