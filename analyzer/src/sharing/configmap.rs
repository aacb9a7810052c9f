//! The device plugin's ConfigMap as data: each key a config name, each value a config. tessera's
//! configs are added (or their text set) **keeping every other key verbatim** (no YAML of the
//! cluster is parsed or re-serialised); a ConfigMap that does not exist yet is created from the
//! default: the ClusterPolicy's default key holding a config without sharing ([`NO_SHARING`]),
//! so unlabelled nodes keep one GPU per GPU. The diff to print, and the pruning of tessera keys
//! no node names.
//!
//! Pure: reads and writes nothing.

use std::collections::{BTreeMap, BTreeSet};

use super::CONFIG_PREFIX;

/// The config a created ConfigMap's default key holds: the device plugin's defaults, no sharing.
pub const NO_SHARING: &str = "version: v1\n";

/// The ConfigMap's data before and after adding tessera's configs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Merged {
    /// `None`: the ConfigMap does not exist (it is created).
    pub before: Option<BTreeMap<String, String>>,
    pub after: BTreeMap<String, String>,
    /// Keys added (tessera's, and the default key of a created ConfigMap).
    pub added: Vec<String>,
    /// tessera keys whose text changed.
    pub updated: Vec<String>,
}

impl Merged {
    pub fn changed(&self) -> bool {
        self.before.as_ref() != Some(&self.after)
    }

    /// A unified diff per key that changes (`key (stored)` → `key (new)`).
    pub fn diff(&self) -> String {
        let empty = BTreeMap::new();
        let before = self.before.as_ref().unwrap_or(&empty);
        let keys: BTreeSet<&String> = before.keys().chain(self.after.keys()).collect();
        let mut out = String::new();
        for k in keys {
            let (a, b) = (
                before.get(k).map_or("", String::as_str),
                self.after.get(k).map_or("", String::as_str),
            );
            if a != b {
                out.push_str(
                    &similar::TextDiff::from_lines(a, b)
                        .unified_diff()
                        .context_radius(3)
                        .header(&format!("{k} (stored)"), &format!("{k} (new)"))
                        .to_string(),
                );
            }
        }
        out
    }
}

/// `stored` with `configs` (name → text) set; when `stored` is `None` (no ConfigMap), the data
/// starts with `default_key` → [`NO_SHARING`].
pub fn merge(
    stored: Option<&BTreeMap<String, String>>,
    default_key: Option<&str>,
    configs: &[(String, String)],
) -> Merged {
    let mut after = stored.cloned().unwrap_or_default();
    let mut added = Vec::new();
    let mut updated = Vec::new();
    if stored.is_none()
        && let Some(d) = default_key
    {
        after.insert(d.to_string(), NO_SHARING.to_string());
        added.push(d.to_string());
    }
    for (name, text) in configs {
        match after.insert(name.clone(), text.clone()) {
            None => added.push(name.clone()),
            Some(old) if &old != text => updated.push(name.clone()),
            Some(_) => {}
        }
    }
    added.dedup();
    Merged {
        before: stored.cloned(),
        after,
        added,
        updated,
    }
}

/// `data` without the tessera keys of `prunable` that no node names (`in_use`); `None` when
/// nothing is removed. `keep` (the ClusterPolicy's default key) is never removed.
pub fn prune(
    data: &BTreeMap<String, String>,
    prunable: &BTreeSet<String>,
    in_use: &BTreeSet<String>,
    keep: Option<&str>,
) -> Option<(BTreeMap<String, String>, Vec<String>)> {
    let gone: Vec<String> = data
        .keys()
        .filter(|k| {
            k.starts_with(CONFIG_PREFIX)
                && super::choose::is_own(k, &data[*k])
                && prunable.contains(*k)
                && !in_use.contains(*k)
                && Some(k.as_str()) != keep
        })
        .cloned()
        .collect();
    if gone.is_empty() {
        return None;
    }
    let mut out = data.clone();
    for k in &gone {
        out.remove(k);
    }
    Some((out, gone))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn other_keys_are_kept_verbatim_and_ours_added() {
        let stored = map(&[("any", "version: v1\n# hand-written, odd spacing:   x\n")]);
        let m = merge(
            Some(&stored),
            Some("any"),
            &[(
                "tessera-mps-2-aa".into(),
                "version: v1\nsharing: {}\n".into(),
            )],
        );
        assert_eq!(m.after["any"], stored["any"]);
        assert_eq!(m.added, vec!["tessera-mps-2-aa"]);
        assert!(m.changed());
        let d = m.diff();
        assert!(
            d.contains("+++ tessera-mps-2-aa (new)") && !d.contains("any (new)"),
            "{d}"
        );
        // Merging again changes nothing.
        let again = merge(
            Some(&m.after),
            Some("any"),
            &[(
                "tessera-mps-2-aa".into(),
                "version: v1\nsharing: {}\n".into(),
            )],
        );
        assert!(!again.changed() && again.added.is_empty());
    }

    #[test]
    fn an_absent_configmap_starts_from_the_default_key() {
        let m = merge(None, Some("default"), &[("tessera-x".into(), "t\n".into())]);
        assert_eq!(
            m.after,
            map(&[("default", NO_SHARING), ("tessera-x", "t\n")])
        );
        assert_eq!(m.added, vec!["default", "tessera-x"]);
        assert!(m.changed());
    }

    #[test]
    fn prune_removes_only_unused_prunable_tessera_keys() {
        use super::super::choose::{Method, config_name, render};
        let own = |m: Method, r: u32| {
            let text = render(m, r);
            (config_name(m, r, &text), text)
        };
        let (a, a_text) = own(Method::TimeSlicing, 2);
        let (b, b_text) = own(Method::TimeSlicing, 3);
        let (c, c_text) = own(Method::Mps, 4);
        // A user's key with tessera's prefix (issue 49: it was pruned, data lost), and one of
        // tessera's names whose value a user edited: neither is tessera's own.
        let users = "tessera-team-a".to_string();
        let (edited, _) = own(Method::Mps, 2);
        let data: BTreeMap<String, String> = [
            ("default".to_string(), "a".to_string()),
            (a.clone(), a_text),
            (b.clone(), b_text),
            (c.clone(), c_text),
            (users.clone(), render(Method::TimeSlicing, 2)),
            (edited.clone(), render(Method::Mps, 2) + "# tuned by hand\n"),
            ("mine".to_string(), "m".to_string()),
        ]
        .into();
        let prunable: BTreeSet<String> = [&a, &b, &users, &edited, &"mine".to_string()]
            .into_iter()
            .cloned()
            .collect();
        let in_use: BTreeSet<String> = [b.clone()].into();
        let (out, gone) = prune(&data, &prunable, &in_use, Some("default")).unwrap();
        assert_eq!(gone, vec![a.clone()]);
        for kept in [&c, &users, &edited, &b, &"mine".to_string()] {
            assert!(out.contains_key(kept), "{kept}");
        }
        assert_eq!(prune(&out, &prunable, &in_use, None), None);
    }
}
