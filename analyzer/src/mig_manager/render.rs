//! The pure half of `--via mig-manager`: a plan's per-node layouts as mig-parted configs, merged
//! into mig-manager's `config.yaml` with every other config kept, the text diff to print, and
//! whether a node's layout changes.
//!
//! Config names are `tessera-<label>-<hash>`, the hash (FNV-1a, 8 hex digits) taken over the
//! config's rendered entries: nodes with the same layout share one config, and a changed layout
//! gets a new name, so mig-manager (which acts on a change of the node label, not of the file)
//! always sees a new label. Every config not named `tessera-…` is kept as found (values equal;
//! comments and formatting of the stored text are not: the file is re-serialised). A `tessera-…`
//! config that no node uses any more and the new layout does not need is pruned.
//!
//! What it does not do: talk to Kubernetes, or check profiles against the GPUs (mig-parted does;
//! tessera plans were checked when they were read).

use std::collections::{BTreeMap, BTreeSet};

use serde_yaml_ng::{Mapping, Value};
use tessera_core::mig::apply::LayoutFile;
use tessera_core::mig::parted::{Devices, PartedEntry, PartedFile};

use super::{CONFIG_PREFIX, NodeView};

/// Bad or unexpected input for rendering.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("{0}")]
    Plan(String),
    #[error(
        "the ConfigMap's config.yaml is not a mig-parted v1 file ({0}); fix or remove it, tessera does not overwrite a file it cannot read"
    )]
    Existing(String),
}

/// One node's wanted layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeLayout {
    pub node: String,
    /// The config's name in the ConfigMap (`tessera-<label>-<hash>`).
    pub config: String,
    pub entries: Vec<PartedEntry>,
}

/// The nodes a plan's config is for: `Some(names)` when every entry names its node, `None` when
/// some entries apply to any node (a node-independent plan or a mig-parted file: the nodes then
/// come from `--node` or `--node-selector`).
pub fn named_nodes(
    plan: &LayoutFile,
    label: Option<&str>,
    source: &str,
) -> Result<Option<BTreeSet<String>>, RenderError> {
    match plan {
        LayoutFile::MigParted(_) => Ok(None),
        LayoutFile::Tessera(p) => {
            let (_, gpus) = p
                .config(label, source)
                .map_err(|e| RenderError::Plan(e.to_string()))?;
            let mut out = BTreeSet::new();
            for g in gpus {
                match &g.node {
                    Some(n) => {
                        out.insert(n.clone());
                    }
                    None => return Ok(None),
                }
            }
            Ok(Some(out))
        }
    }
}

/// The layout config `label` of `plan` asks of each of `nodes` (nodes it has no entry for are
/// left out); returns the label chosen too.
pub fn layouts(
    plan: &LayoutFile,
    label: Option<&str>,
    source: &str,
    nodes: &[NodeView],
) -> Result<(String, Vec<NodeLayout>), RenderError> {
    let (label, per_node): (String, Vec<(String, Vec<PartedEntry>)>) = match plan {
        LayoutFile::Tessera(p) => {
            let (label, gpus) = p
                .config(label, source)
                .map_err(|e| RenderError::Plan(e.to_string()))?;
            let per = nodes
                .iter()
                .map(|n| {
                    let entries = gpus
                        .iter()
                        .filter(|g| g.applies_to(&n.name))
                        .map(|g| {
                            let mut counts = BTreeMap::new();
                            if g.mig_enabled {
                                for i in &g.instances {
                                    *counts.entry(i.profile.clone()).or_insert(0u32) += 1;
                                }
                            }
                            PartedEntry {
                                device_filter: Vec::new(),
                                devices: Devices::Indices(vec![g.gpu]),
                                mig_enabled: g.mig_enabled,
                                mig_devices: counts,
                            }
                        })
                        .collect();
                    (n.name.clone(), entries)
                })
                .collect();
            (label.to_string(), per)
        }
        LayoutFile::MigParted(f) => {
            let chosen = tessera_core::mig::apply::select_parted(f, label, source)
                .map_err(|e| RenderError::Plan(e.to_string()))?;
            let (label, entries) = (chosen.label, chosen.entries);
            let per = nodes
                .iter()
                .map(|n| (n.name.clone(), entries.clone()))
                .collect();
            (label, per)
        }
    };
    let out = per_node
        .into_iter()
        .filter(|(_, e)| !e.is_empty())
        .map(|(node, entries)| NodeLayout {
            node,
            config: config_name(&label, &entries),
            entries,
        })
        .collect();
    Ok((label, out))
}

/// `tessera-<label>-<hash>`, a valid label value (≤ 63 characters of `[a-z0-9.-]`).
pub fn config_name(label: &str, entries: &[PartedEntry]) -> String {
    let mut clean: String = label
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '.' | '-') => c,
            _ => '-',
        })
        .collect();
    clean.truncate(63 - CONFIG_PREFIX.len() - 9);
    let clean = clean.trim_matches(|c| c == '-' || c == '.');
    let text = serde_yaml_ng::to_string(&entries_value(entries)).unwrap_or_default();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{CONFIG_PREFIX}{clean}-{:08x}", (h >> 32) as u32 ^ h as u32)
}

/// A config's entries as mig-parted YAML values.
fn entries_value(entries: &[PartedEntry]) -> Value {
    Value::Sequence(
        entries
            .iter()
            .map(|e| {
                let mut m = Mapping::new();
                if !e.device_filter.is_empty() {
                    m.insert(
                        "device-filter".into(),
                        Value::Sequence(
                            e.device_filter
                                .iter()
                                .map(|d| Value::String(format!("0x{d:08X}")))
                                .collect(),
                        ),
                    );
                }
                m.insert(
                    "devices".into(),
                    match &e.devices {
                        Devices::All => Value::String("all".into()),
                        Devices::Indices(v) => {
                            Value::Sequence(v.iter().map(|i| Value::Number((*i).into())).collect())
                        }
                    },
                );
                m.insert("mig-enabled".into(), Value::Bool(e.mig_enabled));
                if e.mig_enabled {
                    let mut d = Mapping::new();
                    for (k, n) in &e.mig_devices {
                        d.insert(Value::String(k.clone()), Value::Number((*n).into()));
                    }
                    m.insert("mig-devices".into(), Value::Mapping(d));
                }
                Value::Mapping(m)
            })
            .collect(),
    )
}

/// The ConfigMap text before and after, and what changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Merged {
    /// The stored text re-serialised (what the diff compares against; empty when there was none).
    pub before: String,
    pub after: String,
    pub added: Vec<String>,
    pub pruned: Vec<String>,
}

impl Merged {
    pub fn changed(&self) -> bool {
        self.before != self.after
    }

    /// A unified diff of `config.yaml`.
    pub fn diff(&self, name: &str) -> String {
        similar::TextDiff::from_lines(&self.before, &self.after)
            .unified_diff()
            .context_radius(3)
            .header(&format!("{name} (stored)"), &format!("{name} (new)"))
            .to_string()
    }
}

/// The minimal file used when neither the ConfigMap nor the operator's default one exists.
const MINIMAL: &str =
    "version: v1\nmig-configs:\n  all-disabled:\n    - devices: all\n      mig-enabled: false\n";

/// Merge `layouts`' configs into `existing` (the stored `config.yaml`; when `None`, start from
/// `seed`, the operator's default ConfigMap text, or a file with `all-disabled`), keeping every
/// other config; with `prune` (the configs nodes name), `tessera-…` configs neither wanted nor
/// named by a node are removed, without it none is. The text read from the cluster is held to
/// the limits of YAML files (`input_limits::check_yaml`) before it is parsed.
pub fn merge(
    existing: Option<&str>,
    seed: Option<&str>,
    layouts: &[NodeLayout],
    prune: Option<&BTreeSet<String>>,
) -> Result<Merged, RenderError> {
    let base_text = existing.or(seed).unwrap_or(MINIMAL);
    tessera_core::input_limits::check_yaml(base_text)
        .map_err(|e| RenderError::Existing(e.to_string()))?;
    let mut root: Value =
        serde_yaml_ng::from_str(base_text).map_err(|e| RenderError::Existing(e.to_string()))?;
    let map = root
        .as_mapping_mut()
        .ok_or_else(|| RenderError::Existing("not a mapping".into()))?;
    match map.get("version") {
        Some(Value::String(v)) if v == "v1" => {}
        other => {
            return Err(RenderError::Existing(format!(
                "version is {}, expected v1",
                other.map_or("missing".into(), |v| format!("{v:?}"))
            )));
        }
    }
    let before = match existing {
        Some(_) => {
            serde_yaml_ng::to_string(&*map).map_err(|e| RenderError::Existing(e.to_string()))?
        }
        None => String::new(),
    };
    let configs = map
        .get_mut("mig-configs")
        .and_then(Value::as_mapping_mut)
        .ok_or_else(|| RenderError::Existing("no mig-configs mapping".into()))?;
    let wanted: BTreeMap<&str, &NodeLayout> =
        layouts.iter().map(|l| (l.config.as_str(), l)).collect();
    let mut pruned = Vec::new();
    let names: Vec<String> = configs
        .keys()
        .filter_map(|k| k.as_str().map(str::to_string))
        .collect();
    for name in names {
        if name.starts_with(CONFIG_PREFIX)
            && !wanted.contains_key(name.as_str())
            && prune.is_some_and(|in_use| !in_use.contains(&name))
        {
            configs.remove(name.as_str());
            pruned.push(name);
        }
    }
    let mut added = Vec::new();
    for (name, l) in wanted {
        if !configs.contains_key(name) {
            added.push(name.to_string());
        }
        configs.insert(Value::String(name.to_string()), entries_value(&l.entries));
    }
    let after =
        serde_yaml_ng::to_string(&root).map_err(|e| RenderError::Existing(e.to_string()))?;
    // What mig-manager will read must parse as a mig-parted file (tessera's strict reader).
    PartedFile::parse(&after, "the rendered config.yaml")
        .map_err(|e| RenderError::Existing(format!("the merged file does not parse: {e}")))?;
    Ok(Merged {
        before,
        after,
        added,
        pruned,
    })
}

/// Whether a node's GPUs change when its label moves from `current` to `target`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// The node is already labelled with the target config.
    Labelled,
    /// Another config, with the same layout on every GPU the target names.
    SameLayout,
    /// These GPUs' layouts change.
    Gpus(Vec<u32>),
    /// Unknown (no label, or a config tessera cannot resolve per GPU): every GPU may change.
    Unknown(String),
}

impl Change {
    /// Whether the label is set (anything but [`Change::Labelled`]).
    pub fn relabels(&self) -> bool {
        !matches!(self, Change::Labelled)
    }

    /// Whether GPUs (may) change, so pods holding them block the change.
    pub fn disturbs(&self) -> bool {
        matches!(self, Change::Gpus(_) | Change::Unknown(_))
    }
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Change::Labelled => f.write_str("already labelled with it"),
            Change::SameLayout => f.write_str("same layout under a new name"),
            Change::Gpus(g) => {
                let list: Vec<String> = g.iter().map(u32::to_string).collect();
                if g.len() == 1 {
                    write!(f, "GPU {} changes", list[0])
                } else {
                    write!(f, "GPUs {} change", list.join(", "))
                }
            }
            Change::Unknown(why) => write!(f, "every GPU may change: {why}"),
        }
    }
}

/// How `layout` differs from the config the node's label names in `stored` (the parsed stored
/// file, when it parsed).
pub fn change(node: &NodeView, layout: &NodeLayout, stored: Option<&PartedFile>) -> Change {
    let Some(current) = node.config() else {
        return Change::Unknown("the node has no nvidia.com/mig.config label".into());
    };
    if current == layout.config {
        return Change::Labelled;
    }
    let Some(old) = stored.and_then(|f| f.configs.get(current)) else {
        return Change::Unknown(format!(
            "its current config {current:?} is not in the ConfigMap"
        ));
    };
    let mut gpus = BTreeSet::new();
    for e in &layout.entries {
        let Devices::Indices(indices) = &e.devices else {
            return Change::Unknown("the new config selects devices: all".into());
        };
        for &i in indices {
            let before = old.iter().find(|o| match &o.devices {
                Devices::All => true,
                Devices::Indices(v) => v.contains(&i),
            });
            match before {
                Some(o) if !o.device_filter.is_empty() => {
                    return Change::Unknown(format!(
                        "config {current:?} selects GPUs by PCI device id, which the API does not show"
                    ));
                }
                Some(o)
                    if o.mig_enabled == e.mig_enabled
                        && (!e.mig_enabled || o.mig_devices == e.mig_devices) => {}
                _ => {
                    gpus.insert(i);
                }
            }
        }
    }
    if gpus.is_empty() {
        Change::SameLayout
    } else {
        Change::Gpus(gpus.into_iter().collect())
    }
}

/// The label changes as printed: `node: nvidia.com/mig.config: old -> new (why)`.
pub fn describe_label(node: &NodeView, layout: &NodeLayout, change: &Change) -> String {
    format!(
        "{}: {}: {} -> {} ({change})",
        node.name,
        super::CONFIG_LABEL,
        node.config().unwrap_or("(none)"),
        layout.config
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(i: u32, counts: &[(&str, u32)]) -> PartedEntry {
        PartedEntry {
            device_filter: Vec::new(),
            devices: Devices::Indices(vec![i]),
            mig_enabled: !counts.is_empty(),
            mig_devices: counts.iter().map(|(k, n)| (k.to_string(), *n)).collect(),
        }
    }

    fn node(name: &str, config: Option<&str>) -> NodeView {
        let mut n = NodeView {
            name: name.into(),
            ..Default::default()
        };
        if let Some(c) = config {
            n.labels.insert(super::super::CONFIG_LABEL.into(), c.into());
        }
        n
    }

    const STORED: &str = "version: v1\nmig-configs:\n  all-disabled:\n    - devices: all\n      mig-enabled: false\n  all-1g.10gb:\n    - devices: all\n      mig-enabled: true\n      mig-devices:\n        1g.10gb: 7\n  tessera-old-00000000:\n    - devices: [0]\n      mig-enabled: false\n  tessera-used-11111111:\n    - devices: [0]\n      mig-enabled: false\n";

    #[test]
    fn names_follow_the_layout_and_are_valid_label_values() {
        let a = config_name("day", &[entry(0, &[("1g.10gb", 7)])]);
        let b = config_name("day", &[entry(0, &[("1g.10gb", 6)])]);
        assert!(
            a.starts_with("tessera-day-") && a.len() == "tessera-day-".len() + 8,
            "{a}"
        );
        assert_ne!(a, b);
        assert_eq!(a, config_name("day", &[entry(0, &[("1g.10gb", 7)])]));
        let long = config_name(&"Night Shift/".repeat(10), &[]);
        assert!(long.len() <= 63, "{long}");
        assert!(
            long.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.'),
            "{long}"
        );
    }

    #[test]
    fn merge_keeps_other_configs_adds_ours_and_prunes_unused_ones() {
        let layout = NodeLayout {
            node: "n1".into(),
            config: "tessera-day-abcdef01".into(),
            entries: vec![entry(0, &[("3g.40gb", 2)])],
        };
        let in_use: BTreeSet<String> = ["tessera-used-11111111".to_string()].into();
        let m = merge(
            Some(STORED),
            None,
            std::slice::from_ref(&layout),
            Some(&in_use),
        )
        .unwrap();
        let f = PartedFile::parse(&m.after, "t").unwrap();
        let names: Vec<&str> = f.configs.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "all-1g.10gb",
                "all-disabled",
                "tessera-day-abcdef01",
                "tessera-used-11111111"
            ]
        );
        assert_eq!(
            f.configs["tessera-day-abcdef01"][0].mig_devices["3g.40gb"],
            2
        );
        assert_eq!(f.configs["all-1g.10gb"][0].mig_devices["1g.10gb"], 7);
        assert_eq!(m.added, ["tessera-day-abcdef01"]);
        assert_eq!(m.pruned, ["tessera-old-00000000"]);
        assert!(
            m.diff("cm").contains("+  tessera-day-abcdef01:"),
            "{}",
            m.diff("cm")
        );
        // Merging again changes nothing.
        let again = merge(Some(&m.after), None, &[layout], Some(&in_use)).unwrap();
        assert!(!again.changed(), "{}", again.diff("cm"));
    }

    #[test]
    fn a_new_configmap_starts_from_the_seed_or_all_disabled() {
        let m = merge(None, None, &[], Some(&BTreeSet::new())).unwrap();
        assert!(m.before.is_empty());
        assert!(
            PartedFile::parse(&m.after, "t")
                .unwrap()
                .configs
                .contains_key("all-disabled")
        );
        let m = merge(None, Some(STORED), &[], Some(&BTreeSet::new())).unwrap();
        assert!(
            PartedFile::parse(&m.after, "t")
                .unwrap()
                .configs
                .contains_key("all-1g.10gb")
        );
    }

    #[test]
    fn a_file_that_is_not_mig_parted_is_refused() {
        for bad in [
            "[1, 2]",
            "version: v2\nmig-configs: {}\n",
            "version: v1\n",
            ": :",
        ] {
            let e = merge(Some(bad), None, &[], Some(&BTreeSet::new())).unwrap_err();
            assert!(
                e.to_string().contains("not a mig-parted v1 file"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn stored_text_beyond_the_yaml_limits_is_refused_before_it_is_parsed() {
        // 100,000 nested `[`: the depth scan stops at the first one past the limit.
        let deep = format!("version: v1\nmig-configs:\n  x: {}", "[".repeat(100_000));
        let e = merge(Some(&deep), None, &[], Some(&BTreeSet::new())).unwrap_err();
        assert!(e.to_string().contains("nested deeper than"), "{e}");
        let big = format!("version: v1\nmig-configs: {{}}\n#{}", "x".repeat(20 << 20));
        let e = merge(Some(&big), None, &[], None).unwrap_err();
        assert!(e.to_string().contains("larger than the limit"), "{e}");
    }

    #[test]
    fn without_prune_no_config_is_removed() {
        let layout = NodeLayout {
            node: "n".into(),
            config: "tessera-x-2".into(),
            entries: vec![entry(0, &[("1g.10gb", 7)])],
        };
        let m = merge(Some(STORED), None, std::slice::from_ref(&layout), None).unwrap();
        assert!(m.pruned.is_empty());
        let m2 = merge(Some(STORED), None, &[layout], Some(&BTreeSet::new())).unwrap();
        assert_eq!(m.added, m2.added);
    }

    #[test]
    fn change_compares_per_gpu_against_the_current_config() {
        let stored = PartedFile::parse(STORED, "t").unwrap();
        let layout = |counts: &[(&str, u32)]| NodeLayout {
            node: "n".into(),
            config: "tessera-x-1".into(),
            entries: vec![entry(0, counts), entry(1, &[("1g.10gb", 7)])],
        };
        let l = layout(&[("1g.10gb", 7)]);
        assert_eq!(
            change(&node("n", Some("all-1g.10gb")), &l, Some(&stored)),
            Change::SameLayout
        );
        let l = layout(&[("3g.40gb", 2)]);
        assert_eq!(
            change(&node("n", Some("all-1g.10gb")), &l, Some(&stored)),
            Change::Gpus(vec![0])
        );
        assert_eq!(
            change(&node("n", Some("all-disabled")), &l, Some(&stored)),
            Change::Gpus(vec![0, 1])
        );
        assert_eq!(
            change(&node("n", Some("tessera-x-1")), &l, Some(&stored)),
            Change::Labelled
        );
        assert!(matches!(
            change(&node("n", None), &l, Some(&stored)),
            Change::Unknown(_)
        ));
        assert!(matches!(
            change(&node("n", Some("gone")), &l, Some(&stored)),
            Change::Unknown(_)
        ));
    }
}
