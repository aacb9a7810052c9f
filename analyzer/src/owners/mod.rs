//! Owners: the contact of each team (a namespace, or a Slurm job as `slurm job N`), so that waste
//! has an addressee (`docs/report.md`, "Owners"). The report's team table and Actions, notify's
//! `owner` label and `tessera job` read them from one [`Owners`].
//!
//! Sources, the first that names a team wins:
//! 1. `--owners FILE` ([`Owners::load`]): a TOML table `[owners]` of team → contact that the
//!    platform team maintains (namespaces and `slurm job N` alike);
//! 2. the namespaces' labels and annotations read from the Kubernetes API
//!    ([`Owners::from_namespaces`], `kubernetes::namespaces`) when the command is given cluster
//!    access (`--owners.kubernetes`, `--kubeconfig`, `--context`);
//! 3. namespace labels as kube-state-metrics exports them in `kube_namespace_labels`
//!    ([`Owners::from_namespace_labels`]), read by the command through the `prometheus:` source;
//! 4. for Slurm jobs, their user and account from Slurm's accounting (`sacct`,
//!    [`Owners::from_slurm`]); absent or failing `sacct` is one note, never an error.
//!
//! On one namespace the precedence is [`OWNER_KEYS`]: `tessera.io/owner`, then `owner`, then
//! `team` ([`contact_of`]; from the API a key's label before its annotation), whether the keys are the API's (`tessera.io/owner`) or
//! kube-state-metrics' sanitised label names (`label_tessera_io_owner`, [`sanitized`]).
//! kube-state-metrics exports only allow-listed labels; when none of these is there, the notes
//! ([`Owners::notes`]) say so and give the flag ([`ALLOWLIST_FLAG`]).
//!
//! Pure but for reading the owners file and running `sacct`: it queries no server (the command
//! does) and guesses nothing: a team without a contact has none (shown as `unknown`).

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

pub mod sacct;

use crate::kubernetes::namespaces::NamespaceMeta;

/// The keys that name a namespace's owner, first wins (labels or annotations).
pub const OWNER_KEYS: [&str; 3] = ["tessera.io/owner", "owner", "team"];

/// The kube-state-metrics flag that exports the owner labels in `kube_namespace_labels`.
pub const ALLOWLIST_FLAG: &str =
    "--metric-labels-allowlist=namespaces=[tessera.io/owner,owner,team]";

/// The series of kube-state-metrics with the namespaces' labels.
pub const NAMESPACE_LABELS_METRIC: &str = "kube_namespace_labels";

/// The largest owners file read (1 MiB).
const MAX_FILE_BYTES: u64 = 1 << 20;
/// The longest contact kept (characters).
const MAX_CONTACT: usize = 256;

/// Errors of the owners file.
#[derive(Debug, thiserror::Error)]
pub enum OwnersError {
    #[error("reading owners file {path}: {reason}")]
    Read { path: String, reason: String },
    #[error(
        "bad owners file {path}: {reason} (expected a TOML table [owners] of team = \"contact\")"
    )]
    Parse { path: String, reason: String },
}

/// A team's key: its namespace, else its Slurm job (`slurm job N`); the report's and the
/// owners file's name of a team.
pub fn team_of(namespace: Option<&str>, slurm: Option<&str>) -> Option<String> {
    match (namespace, slurm) {
        (Some(ns), _) => Some(ns.to_string()),
        (None, Some(j)) => Some(format!("slurm job {j}")),
        _ => None,
    }
}

/// kube-state-metrics' name of a Kubernetes label key: `label_` and the key with every character
/// that is not an ASCII letter, digit or `_` made `_` (`tessera.io/owner` →
/// `label_tessera_io_owner`).
pub fn sanitized(key: &str) -> String {
    let body: String = key
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("label_{body}")
}

/// The owner a namespace's labels (or annotations) name, by [`OWNER_KEYS`] precedence; keys as
/// the API gives them or as kube-state-metrics sanitises them. Blank values name no one.
pub fn contact_of(labels: &BTreeMap<String, String>) -> Option<String> {
    OWNER_KEYS.iter().find_map(|k| {
        [k.to_string(), sanitized(k)]
            .iter()
            .filter_map(|key| labels.get(key))
            .map(|v| v.trim())
            .find(|v| !v.is_empty())
            .map(|v| v.chars().take(MAX_CONTACT).collect())
    })
}

/// Team → contact, and what the sources said (notes for the report's data quality).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Owners {
    map: BTreeMap<String, String>,
    /// Where a source could not give owners, and what to do about it.
    pub notes: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OwnersFile {
    owners: BTreeMap<String, String>,
}

impl Owners {
    /// The owners file (`--owners FILE`): `[owners]` with `team = "contact"` lines; a blank
    /// team or contact is an error naming its line.
    pub fn load(path: &Path) -> Result<Owners, OwnersError> {
        let p = path.display().to_string();
        let read = |reason: String| OwnersError::Read {
            path: p.clone(),
            reason,
        };
        let len = std::fs::metadata(path)
            .map_err(|e| read(e.to_string()))?
            .len();
        if len > MAX_FILE_BYTES {
            return Err(read(format!("{len} bytes, more than the 1 MiB allowed")));
        }
        let text = std::fs::read_to_string(path).map_err(|e| read(e.to_string()))?;
        Owners::parse(&text).map_err(|reason| OwnersError::Parse { path: p, reason })
    }

    /// The owners file's text (see [`Owners::load`]); the error names the line.
    pub fn parse(text: &str) -> Result<Owners, String> {
        let file: OwnersFile =
            toml::from_str(text).map_err(|e| e.to_string().trim_end().replace('\n', " "))?;
        let mut map = BTreeMap::new();
        for (team, contact) in file.owners {
            let line = text
                .lines()
                .position(|l| l.contains(team.as_str()))
                .map_or(String::new(), |i| format!("line {}: ", i + 1));
            if team.trim().is_empty() {
                return Err(format!("{line}a blank team"));
            }
            if contact.trim().is_empty() || contact.chars().count() > MAX_CONTACT {
                return Err(format!(
                    "{line}team {team:?}: the contact must be 1 to {MAX_CONTACT} characters"
                ));
            }
            map.insert(team, contact.trim().to_string());
        }
        Ok(Owners {
            map,
            notes: Vec::new(),
        })
    }

    /// The owners in `kube_namespace_labels` series (each series' labels, `namespace` among
    /// them), with a note when there are no series or none carries an owner label.
    pub fn from_namespace_labels(source: &str, series: &[BTreeMap<String, String>]) -> Owners {
        let mut o = Owners::default();
        for s in series {
            if let (Some(ns), Some(c)) = (s.get("namespace"), contact_of(s)) {
                o.map.entry(ns.clone()).or_insert(c);
            }
        }
        if series.is_empty() {
            o.notes.push(format!(
                "owners: {source} has no {NAMESPACE_LABELS_METRIC} series (kube-state-metrics): \
                 namespaces' owners are unknown unless --owners names them"
            ));
        } else if o.map.is_empty() {
            o.notes.push(format!(
                "owners: {source}'s {NAMESPACE_LABELS_METRIC} has none of the labels {} on any \
                 of {} namespace(s): kube-state-metrics exports only allow-listed labels; run it \
                 with {ALLOWLIST_FLAG} (or give --owners FILE)",
                OWNER_KEYS.map(sanitized).join(", "),
                series.len()
            ));
        }
        o
    }

    /// The owners in the namespaces' labels and annotations as the Kubernetes API gives them
    /// (`source` names the cluster in the note): by [`OWNER_KEYS`], a key's label before the
    /// same key's annotation; a note when no namespace names an owner.
    pub fn from_namespaces(source: &str, namespaces: &[NamespaceMeta]) -> Owners {
        let mut o = Owners::default();
        for n in namespaces {
            let mut keys = n.annotations.clone();
            keys.extend(
                n.labels
                    .iter()
                    .filter(|(_, v)| !v.trim().is_empty())
                    .map(|(k, v)| (k.clone(), v.clone())),
            );
            if let Some(c) = contact_of(&keys) {
                o.map.insert(n.name.clone(), c);
            }
        }
        if o.map.is_empty() {
            o.notes.push(format!(
                "owners: none of the {} namespace(s) of {source} has a label or annotation {}:                  namespaces' owners are unknown unless --owners names them",
                namespaces.len(),
                OWNER_KEYS.join(", ")
            ));
        }
        o
    }

    /// The Slurm jobs' owners `sacct` gives (see [`sacct`]), as teams `slurm job N`.
    pub fn from_slurm(found: sacct::SlurmOwners) -> Owners {
        Owners {
            map: found
                .by_job
                .into_iter()
                .filter_map(|(j, c)| team_of(None, Some(&j)).map(|t| (t, c)))
                .collect(),
            notes: found.note.into_iter().collect(),
        }
    }

    /// Adds `other`'s owners of teams this one does not name, and its notes.
    pub fn merge(&mut self, other: Owners) {
        for (k, v) in other.map {
            self.map.entry(k).or_insert(v);
        }
        self.notes.extend(other.notes);
    }

    /// The contact of `team`, when one is known.
    pub fn get(&self, team: &str) -> Option<&str> {
        self.map.get(team).map(String::as_str)
    }

    /// The contact of the team of a namespace or Slurm job ([`team_of`]).
    pub fn of(&self, namespace: Option<&str>, slurm: Option<&str>) -> Option<&str> {
        team_of(namespace, slurm).and_then(|t| self.get(&t))
    }

    /// The contacts of several teams, each once, in order, `unknown` for a team without one;
    /// `None` when no team has one.
    pub fn of_teams<'a>(&self, teams: impl IntoIterator<Item = Option<&'a str>>) -> Option<String> {
        let mut out: Vec<&str> = Vec::new();
        let mut known = false;
        for t in teams {
            let c = t.and_then(|t| self.get(t));
            known |= c.is_some();
            let c = c.unwrap_or("unknown");
            if !out.contains(&c) {
                out.push(c);
            }
        }
        known.then(|| out.join(", "))
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Every team named, with its contact.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.map.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn names_are_sanitised_as_kube_state_metrics_does() {
        assert_eq!(sanitized("tessera.io/owner"), "label_tessera_io_owner");
        assert_eq!(sanitized("owner"), "label_owner");
        assert_eq!(
            sanitized("app.kubernetes.io/part-of"),
            "label_app_kubernetes_io_part_of"
        );
    }

    #[test]
    fn precedence_is_tessera_owner_then_owner_then_team() {
        let all = labels(&[
            ("team", "t@x"),
            ("owner", "o@x"),
            ("tessera.io/owner", "tessera@x"),
        ]);
        assert_eq!(contact_of(&all).as_deref(), Some("tessera@x"));
        let ksm = labels(&[("label_team", "t@x"), ("label_owner", "o@x")]);
        assert_eq!(contact_of(&ksm).as_deref(), Some("o@x"));
        let ksm = labels(&[("label_team", "t@x"), ("label_owner", " ")]);
        assert_eq!(
            contact_of(&ksm).as_deref(),
            Some("t@x"),
            "blank names no one"
        );
        assert_eq!(contact_of(&labels(&[("namespace", "a")])), None);
    }

    #[test]
    fn namespace_labels_give_owners_or_a_note() {
        let series = [
            labels(&[("namespace", "serving"), ("label_tessera_io_owner", "ml@x")]),
            labels(&[("namespace", "research")]),
        ];
        let o = Owners::from_namespace_labels("prometheus:u", &series);
        assert_eq!(o.get("serving"), Some("ml@x"));
        assert_eq!(o.get("research"), None);
        assert!(o.notes.is_empty());
        let none = Owners::from_namespace_labels("prometheus:u", &series[1..]);
        assert!(none.notes[0].contains(ALLOWLIST_FLAG), "{:?}", none.notes);
        let absent = Owners::from_namespace_labels("prometheus:u", &[]);
        assert!(absent.notes[0].contains("no kube_namespace_labels"));
    }

    #[test]
    fn api_namespaces_labels_before_annotations_by_key() {
        let ns = |name: &str, l: &[(&str, &str)], a: &[(&str, &str)]| NamespaceMeta {
            name: name.into(),
            labels: labels(l),
            annotations: labels(a),
        };
        let list = [
            ns("a", &[("team", "team@x")], &[("tessera.io/owner", "ann@x")]),
            ns("b", &[("owner", "label@x")], &[("owner", "ann@x")]),
            ns("c", &[("owner", " ")], &[("owner", "ann@x")]),
            ns("d", &[("app", "x")], &[]),
        ];
        let o = Owners::from_namespaces("the cluster", &list);
        assert_eq!(o.get("a"), Some("ann@x"), "tessera.io/owner beats team");
        assert_eq!(
            o.get("b"),
            Some("label@x"),
            "a key's label before its annotation"
        );
        assert_eq!(o.get("c"), Some("ann@x"), "a blank label names no one");
        assert_eq!(o.get("d"), None);
        assert!(o.notes.is_empty());
        let none = Owners::from_namespaces("the cluster", &list[3..]);
        assert!(
            none.notes[0].contains("none of the 1 namespace"),
            "{:?}",
            none.notes
        );
    }

    #[test]
    fn the_file_wins_and_errors_name_the_line() {
        let mut o = Owners::parse("[owners]\nserving = \"a@x\"\n\"slurm job 7\" = \"b@x\"\n")
            .expect("parse");
        o.merge(Owners::from_namespace_labels(
            "p",
            &[labels(&[
                ("namespace", "serving"),
                ("label_owner", "other@x"),
            ])],
        ));
        assert_eq!(o.get("serving"), Some("a@x"));
        assert_eq!(o.of(None, Some("7")), Some("b@x"));
        assert_eq!(
            o.of_teams([Some("serving"), None, Some("x")]).as_deref(),
            Some("a@x, unknown")
        );
        assert_eq!(o.of_teams([Some("x")]), None);
        let e = Owners::parse("[owners]\nserving = \"\"\n").unwrap_err();
        assert!(e.contains("line 2"), "{e}");
        let e = Owners::parse("[owners]\nserving = 3\n").unwrap_err();
        assert!(e.contains("line 2"), "{e}");
        let e = Owners::parse("serving = \"a\"\n").unwrap_err();
        assert!(e.contains("serving"), "{e}");
    }
}
