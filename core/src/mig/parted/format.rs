//! The nvidia-mig-parted v1 file format and its strict parser: [`PartedFile`] read from a
//! file or text, its entries ([`PartedEntry`], [`Devices`]), and the selection of one config
//! by label into a [`PartedConfig`].
//!
//! It does not look at GPUs: which GPUs an entry selects and whether its instances fit is
//! [`super::placement`]'s business; the comparison with the actual layout is [`super::drift`]'s.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde::Deserialize;
use serde::de::{self, Deserializer, SeqAccess, Visitor};

use super::{MAX_DEVICE_INDICES, MAX_GPU_INSTANCES, PartedConfig, PartedError};
use crate::input_limits;
use crate::mig;
use crate::model::GpuInfo;

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
pub struct PartedEntry {
    /// PCI device ids (`0x233010DE`); empty = any device.
    pub device_filter: Vec<u32>,
    pub devices: Devices,
    pub mig_enabled: bool,
    /// GPU instances per profile name (`1g.10gb` → 7); zero counts are dropped.
    pub mig_devices: BTreeMap<String, u32>,
}

impl PartedEntry {
    /// Whether the entry selects GPU `gpu`. `Err` when it has a device filter and the GPU's
    /// PCI device id is unknown (a model tessera has no table for).
    pub(super) fn selects(&self, gpu: &GpuInfo) -> Result<bool, String> {
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
    pub(super) fn same_layout(&self, other: &PartedEntry) -> bool {
        self.mig_enabled == other.mig_enabled && self.mig_devices == other.mig_devices
    }
}

/// A parsed mig-parted v1 file: every config, by label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartedFile {
    /// Where it was read from (for messages).
    pub source: String,
    pub configs: BTreeMap<String, Vec<PartedEntry>>,
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
pub(super) fn check_profile_name(name: &str) -> Result<(), String> {
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

impl PartedFile {
    /// Read and parse `path` (at most [`input_limits::MAX_YAML_BYTES`] of it).
    pub fn from_file(path: &Path) -> Result<PartedFile, PartedError> {
        let text = input_limits::read_to_string(path, input_limits::MAX_YAML_BYTES).map_err(
            |e| match e {
                input_limits::ReadError::Io(error) => PartedError::Read {
                    path: path.to_path_buf(),
                    error,
                },
                input_limits::ReadError::Limit(limit) => PartedError::Limit {
                    path: path.display().to_string(),
                    limit,
                },
            },
        )?;
        PartedFile::parse(&text, &path.display().to_string())
    }

    /// Parse the text of a mig-parted v1 file; `source` names it in errors. Its size and depth
    /// are checked against [`input_limits`] first.
    pub fn parse(text: &str, source: &str) -> Result<PartedFile, PartedError> {
        input_limits::check_yaml(text).map_err(|limit| PartedError::Limit {
            path: source.to_string(),
            limit,
        })?;
        let raw: RawFile = serde_yaml_ng::from_str(text).map_err(|e| PartedError::Parse {
            path: source.to_string(),
            message: input_limits::yaml_error(&e),
        })?;
        let invalid = |item: String, message: String| PartedError::Invalid {
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
                out.push(entry(&item, e).map_err(|(item, message)| invalid(item, message))?);
            }
            configs.insert(label, out);
        }
        Ok(PartedFile {
            source: source.to_string(),
            configs,
        })
    }

    /// The config labelled `label` (what `nvidia-mig-parted apply -c LABEL` would apply).
    pub fn select(&self, label: &str) -> Result<PartedConfig, PartedError> {
        let entries = self
            .configs
            .get(label)
            .ok_or_else(|| PartedError::NoLabel {
                path: self.source.clone(),
                label: label.to_string(),
                available: self.configs.keys().cloned().collect::<Vec<_>>().join(", "),
            })?;
        Ok(PartedConfig {
            source: self.source.clone(),
            label: label.to_string(),
            entries: entries.clone(),
        })
    }
}

/// One entry of a config (`item` names it): its device filter parsed, MIG devices given exactly
/// when MIG is enabled, known profile names, instance counts and device indices within bounds.
/// Returns `(item, message)` of the first problem.
fn entry(item: &str, e: RawEntry) -> Result<PartedEntry, (String, String)> {
    let mut device_filter = Vec::new();
    for s in e.device_filter.map(|f| f.0).unwrap_or_default() {
        device_filter.push(parse_device_id(&s).ok_or_else(|| {
            (
                format!("{item}.device-filter"),
                format!(
                    "bad PCI device id {s:?}: expected 0x and up to 8 hex digits, e.g. \"0x233010DE\""
                ),
            )
        })?);
    }
    let mig_devices = match (e.mig_enabled, e.mig_devices.map(|m| m.0)) {
        (true, None) => {
            return Err((
                item.to_string(),
                "mig-devices is required when mig-enabled is true (use {} for no instances)".into(),
            ));
        }
        (false, Some(d)) if !d.is_empty() => {
            return Err((
                format!("{item}.mig-devices"),
                "MIG devices given while mig-enabled is false".into(),
            ));
        }
        (_, d) => d.unwrap_or_default(),
    };
    for name in mig_devices.keys() {
        check_profile_name(name).map_err(|m| (format!("{item}.mig-devices"), m))?;
    }
    // Counts are expanded into lists of instances later: bound them here.
    let mut total = 0u64;
    for (name, count) in &mig_devices {
        if *count > MAX_GPU_INSTANCES {
            return Err((
                format!("{item}.mig-devices"),
                format!(
                    "{count} × {name:?}; expected at most {MAX_GPU_INSTANCES} GPU instances on a GPU"
                ),
            ));
        }
        total += *count as u64;
    }
    if total > MAX_GPU_INSTANCES as u64 {
        return Err((
            format!("{item}.mig-devices"),
            format!("{total} GPU instances; expected at most {MAX_GPU_INSTANCES} on a GPU"),
        ));
    }
    if let Devices::Indices(v) = &e.devices
        && v.len() > MAX_DEVICE_INDICES
    {
        return Err((
            format!("{item}.devices"),
            format!(
                "{} GPU indices; expected at most {MAX_DEVICE_INDICES}",
                v.len()
            ),
        ));
    }
    Ok(PartedEntry {
        device_filter,
        devices: e.devices,
        mig_enabled: e.mig_enabled,
        mig_devices: mig_devices.into_iter().filter(|(_, n)| *n > 0).collect(),
    })
}
