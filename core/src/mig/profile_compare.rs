//! Comparing a GPU's MIG profile table as NVML reports it with tessera's built-in table
//! ([`crate::mig`]): missing or extra profile ids, a different profile index, compute slices,
//! memory slices, maximum count, placements, name, and a memory size beyond a tolerance.
//!
//! The built-in memory sizes are approximate (derived from one memory slice's size), so memory is
//! compared with [`MEMORY_TOLERANCE`]; every other field must be equal. A GPU whose product name
//! has no built-in model gives [`Comparison::UnknownModel`].
//!
//! Pure: the caller reads NVML (`NvmlBackend::profile_table`, `possible_placements`) and passes
//! the rows in; this module never calls NVML and never changes a GPU.

use serde::Serialize;

use crate::mig::{self, GpuModel, MigProfile};
use crate::model::Placement;

/// Relative difference of memory sizes still counted as equal (the built-in sizes are
/// approximate).
pub const MEMORY_TOLERANCE: f64 = 0.05;

/// One GPU-instance profile as NVML reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReportedProfile {
    /// Profile id (`info.id`).
    pub id: u32,
    /// NVML profile index queried.
    pub index: u32,
    /// Profile name, where the driver reports one (the v1 info call has none).
    pub name: Option<String>,
    pub compute_slices: u32,
    /// Memory slices: the size of its placements (`None` when NVML lists no placement).
    pub memory_slices: Option<u32>,
    pub memory_mib: u64,
    /// Maximum number of instances (`instanceCount`).
    pub max_count: u32,
    /// Possible placements, as NVML lists them.
    pub placements: Vec<Placement>,
}

impl ReportedProfile {
    /// A built-in profile as NVML would report it (for `--backend sim` and tests).
    pub fn from_builtin(p: &MigProfile) -> ReportedProfile {
        ReportedProfile {
            id: p.id,
            index: p.index,
            name: Some(p.name.clone()),
            compute_slices: p.compute_slices,
            memory_slices: Some(p.memory_slices),
            memory_mib: p.memory_bytes >> 20,
            max_count: p.max_count,
            placements: p.placements().collect(),
        }
    }

    /// Memory slices from a placement list: the common size of its placements, `None` when the
    /// list is empty or its sizes differ.
    pub fn memory_slices_of(placements: &[Placement]) -> Option<u32> {
        let first = placements.first()?.size;
        placements.iter().all(|p| p.size == first).then_some(first)
    }
}

/// One way NVML's table differs from the built-in one.
#[derive(Debug, Clone, PartialEq, Serialize, thiserror::Error)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Difference {
    #[error(
        "NVML reports no MIG profiles, the built-in table has {builtin}; (some drivers report the table only with MIG mode enabled)"
    )]
    NoProfilesReported { builtin: usize },
    #[error("profile id {id} ({name}) is in the built-in table but NVML does not report it")]
    MissingProfile { id: u32, name: String },
    #[error("profile id {id} (index {index}) is reported by NVML but not in the built-in table")]
    ExtraProfile { id: u32, index: u32 },
    #[error("profile id {id}: NVML reports profile index {nvml}, the built-in table has {builtin}")]
    Index { id: u32, nvml: u32, builtin: u32 },
    #[error("profile id {id}: NVML reports name {nvml:?}, the built-in table has {builtin:?}")]
    Name {
        id: u32,
        nvml: String,
        builtin: String,
    },
    #[error(
        "profile id {id} ({name}): NVML reports {nvml} compute slices, the built-in table has {builtin}"
    )]
    ComputeSlices {
        id: u32,
        name: String,
        nvml: u32,
        builtin: u32,
    },
    #[error(
        "profile id {id} ({name}): NVML's placements have {nvml} memory slices, the built-in table has {builtin}"
    )]
    MemorySlices {
        id: u32,
        name: String,
        nvml: String,
        builtin: u32,
    },
    #[error(
        "profile id {id} ({name}): NVML reports at most {nvml} instances, the built-in table has {builtin}"
    )]
    MaxCount {
        id: u32,
        name: String,
        nvml: u32,
        builtin: u32,
    },
    #[error(
        "profile id {id} ({name}): NVML reports placements {}, the built-in table has {}",
        fmt_placements(nvml),
        fmt_placements(builtin)
    )]
    Placements {
        id: u32,
        name: String,
        nvml: Vec<Placement>,
        builtin: Vec<Placement>,
    },
    #[error(
        "profile id {id} ({name}): NVML reports {nvml_mib} MiB, the built-in table has {builtin_mib} MiB (approximate; off by more than {}%)",
        MEMORY_TOLERANCE * 100.0
    )]
    MemorySize {
        id: u32,
        name: String,
        nvml_mib: u64,
        builtin_mib: u64,
    },
}

/// Placements as `start+size` items: `[0+4, 4+4]`.
pub fn fmt_placements(p: &[Placement]) -> String {
    let items: Vec<String> = p
        .iter()
        .map(|p| format!("{}+{}", p.start, p.size))
        .collect();
    format!("[{}]", items.join(", "))
}

/// The result of comparing one GPU's reported table with the built-in one.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "result", rename_all = "kebab-case")]
pub enum Comparison {
    /// No built-in model has this NVML product name.
    UnknownModel { name: String },
    /// Compared with the built-in model `model`; empty `differences` means equal.
    Compared {
        model: String,
        differences: Vec<Difference>,
    },
}

impl Comparison {
    /// Whether the tables are equal (an unknown model is not a match).
    pub fn matches(&self) -> bool {
        matches!(self, Comparison::Compared { differences, .. } if differences.is_empty())
    }
}

impl std::fmt::Display for Comparison {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Comparison::UnknownModel { name } => write!(f, "no built-in table for {name:?}"),
            Comparison::Compared { model, differences } if differences.is_empty() => {
                write!(f, "matches the built-in table of {model}")
            }
            Comparison::Compared { model, differences } => write!(
                f,
                "differs from the built-in table of {model} ({} difference{})",
                differences.len(),
                if differences.len() == 1 { "" } else { "s" }
            ),
        }
    }
}

/// Compare what NVML reports for a GPU named `nvml_name` with the built-in model of that name.
pub fn compare(nvml_name: &str, reported: &[ReportedProfile]) -> Comparison {
    match mig::model_by_nvml_name(nvml_name) {
        None => Comparison::UnknownModel {
            name: nvml_name.to_string(),
        },
        Some(model) => Comparison::Compared {
            model: model.key.to_string(),
            differences: compare_with(model, reported),
        },
    }
}

/// Every difference between `reported` and `model`'s table, in the built-in table's order, then
/// extra profiles.
pub fn compare_with(model: &GpuModel, reported: &[ReportedProfile]) -> Vec<Difference> {
    let mut out = Vec::new();
    if reported.is_empty() && model.supports_mig() {
        out.push(Difference::NoProfilesReported {
            builtin: model.profiles.len(),
        });
        return out;
    }
    for p in &model.profiles {
        let Some(r) = reported.iter().find(|r| r.id == p.id) else {
            out.push(Difference::MissingProfile {
                id: p.id,
                name: p.name.clone(),
            });
            continue;
        };
        compare_profile(p, r, &mut out);
    }
    for r in reported {
        if model.profile(r.id).is_none() {
            out.push(Difference::ExtraProfile {
                id: r.id,
                index: r.index,
            });
        }
    }
    out
}

fn compare_profile(p: &MigProfile, r: &ReportedProfile, out: &mut Vec<Difference>) {
    let (id, name) = (p.id, p.name.clone());
    if r.index != p.index {
        out.push(Difference::Index {
            id,
            nvml: r.index,
            builtin: p.index,
        });
    }
    if let Some(n) = &r.name {
        // Drivers prefix the name with "MIG " (`MIG 1g.10gb`).
        let bare = n.strip_prefix("MIG ").unwrap_or(n);
        if bare != p.name {
            out.push(Difference::Name {
                id,
                nvml: n.clone(),
                builtin: p.name.clone(),
            });
        }
    }
    if r.compute_slices != p.compute_slices {
        out.push(Difference::ComputeSlices {
            id,
            name: name.clone(),
            nvml: r.compute_slices,
            builtin: p.compute_slices,
        });
    }
    // Without placements the memory slices are unknown; the placement difference says so.
    if r.memory_slices != Some(p.memory_slices) && !r.placements.is_empty() {
        out.push(Difference::MemorySlices {
            id,
            name: name.clone(),
            nvml: r
                .memory_slices
                .map_or_else(|| "mixed".to_string(), |s| s.to_string()),
            builtin: p.memory_slices,
        });
    }
    if r.max_count != p.max_count {
        out.push(Difference::MaxCount {
            id,
            name: name.clone(),
            nvml: r.max_count,
            builtin: p.max_count,
        });
    }
    let mut got = r.placements.clone();
    got.sort();
    let want: Vec<Placement> = p.placements().collect();
    if got != want {
        out.push(Difference::Placements {
            id,
            name: name.clone(),
            nvml: r.placements.clone(),
            builtin: want,
        });
    }
    let builtin_mib = p.memory_bytes >> 20;
    let off = (r.memory_mib as f64 - builtin_mib as f64).abs() / builtin_mib.max(1) as f64;
    if off > MEMORY_TOLERANCE {
        out.push(Difference::MemorySize {
            id,
            name,
            nvml_mib: r.memory_mib,
            builtin_mib,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h100() -> &'static GpuModel {
        mig::model("H100-80GB").unwrap()
    }

    fn builtin(model: &GpuModel) -> Vec<ReportedProfile> {
        model
            .profiles
            .iter()
            .map(ReportedProfile::from_builtin)
            .collect()
    }

    fn one(model: &GpuModel, edit: impl FnOnce(&mut Vec<ReportedProfile>)) -> Vec<Difference> {
        let mut r = builtin(model);
        edit(&mut r);
        compare_with(model, &r)
    }

    fn row(r: &mut [ReportedProfile], id: u32) -> &mut ReportedProfile {
        r.iter_mut().find(|p| p.id == id).unwrap()
    }

    #[test]
    fn every_builtin_model_matches_itself() {
        for m in mig::models() {
            let c = compare(m.nvml_name, &builtin(m));
            assert!(c.matches(), "{}: {c:?}", m.key);
            assert_eq!(
                c.to_string(),
                format!("matches the built-in table of {}", m.key)
            );
        }
    }

    #[test]
    fn unknown_model() {
        let c = compare("NVIDIA Tesla T4", &[]);
        assert!(!c.matches());
        assert_eq!(c.to_string(), "no built-in table for \"NVIDIA Tesla T4\"");
    }

    #[test]
    fn missing_and_extra_profiles() {
        let d = one(h100(), |r| {
            r.retain(|p| p.id != 15);
            r.push(ReportedProfile {
                id: 32,
                index: 0xA,
                name: None,
                compute_slices: 1,
                memory_slices: Some(1),
                memory_mib: 9856,
                max_count: 7,
                placements: vec![],
            });
        });
        assert_eq!(
            d,
            vec![
                Difference::MissingProfile {
                    id: 15,
                    name: "1g.20gb".into()
                },
                Difference::ExtraProfile { id: 32, index: 0xA },
            ]
        );
        assert_eq!(
            d[0].to_string(),
            "profile id 15 (1g.20gb) is in the built-in table but NVML does not report it"
        );
    }

    #[test]
    fn no_profiles_reported() {
        let d = compare_with(h100(), &[]);
        assert_eq!(d, vec![Difference::NoProfilesReported { builtin: 7 }]);
        assert!(d[0].to_string().contains("MIG mode"));
    }

    #[test]
    fn compute_slices_max_count_and_index() {
        let d = one(h100(), |r| {
            let p = row(r, 9);
            p.compute_slices = 4;
            p.max_count = 1;
            p.index = 3;
        });
        assert_eq!(
            d,
            vec![
                Difference::Index {
                    id: 9,
                    nvml: 3,
                    builtin: 2
                },
                Difference::ComputeSlices {
                    id: 9,
                    name: "3g.40gb".into(),
                    nvml: 4,
                    builtin: 3
                },
                Difference::MaxCount {
                    id: 9,
                    name: "3g.40gb".into(),
                    nvml: 1,
                    builtin: 2
                },
            ]
        );
        assert_eq!(
            d[2].to_string(),
            "profile id 9 (3g.40gb): NVML reports at most 1 instances, the built-in table has 2"
        );
    }

    #[test]
    fn placement_starts_and_sizes() {
        let d = one(h100(), |r| {
            row(r, 14).placements = vec![
                Placement { start: 0, size: 2 },
                Placement { start: 2, size: 2 },
            ];
        });
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(
            d[0].to_string(),
            "profile id 14 (2g.20gb): NVML reports placements [0+2, 2+2], the built-in table has [0+2, 2+2, 4+2]"
        );
        // Sizes: the memory slices differ as well as the placements.
        let d = one(h100(), |r| {
            let p = row(r, 5);
            p.placements = vec![Placement { start: 0, size: 8 }];
            p.memory_slices = Some(8);
        });
        assert!(
            matches!(
                d[..],
                [
                    Difference::MemorySlices {
                        id: 5,
                        builtin: 4,
                        ..
                    },
                    Difference::Placements { id: 5, .. }
                ]
            ),
            "{d:?}"
        );
        assert!(
            d[0].to_string().contains("have 8 memory slices"),
            "{}",
            d[0]
        );
        // Order does not matter.
        let d = one(h100(), |r| row(r, 9).placements.reverse());
        assert!(d.is_empty(), "{d:?}");
    }

    #[test]
    fn names_with_and_without_the_mig_prefix() {
        let d = one(h100(), |r| row(r, 19).name = Some("MIG 1g.10gb".into()));
        assert!(d.is_empty(), "{d:?}");
        let d = one(h100(), |r| row(r, 19).name = Some("MIG 1g.12gb".into()));
        assert_eq!(
            d,
            vec![Difference::Name {
                id: 19,
                nvml: "MIG 1g.12gb".into(),
                builtin: "1g.10gb".into()
            }]
        );
    }

    #[test]
    fn memory_within_tolerance_is_equal_beyond_it_is_reported() {
        let builtin_mib = h100().profile(0).unwrap().memory_bytes >> 20;
        let d = one(h100(), |r| {
            row(r, 0).memory_mib = builtin_mib - builtin_mib / 50
        });
        assert!(d.is_empty(), "2% off is within the tolerance: {d:?}");
        let d = one(h100(), |r| row(r, 0).memory_mib = 70000);
        assert_eq!(
            d,
            vec![Difference::MemorySize {
                id: 0,
                name: "7g.80gb".into(),
                nvml_mib: 70000,
                builtin_mib
            }]
        );
        assert!(
            d[0].to_string().contains("NVML reports 70000 MiB"),
            "{}",
            d[0]
        );
        assert!(d[0].to_string().contains("approximate"), "{}", d[0]);
    }

    #[test]
    fn serialises_with_kind_tags() {
        let c = compare("NVIDIA A30", &builtin(mig::model("A30-24GB").unwrap())[1..]);
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(v["result"], "compared");
        assert_eq!(v["model"], "A30-24GB");
        assert_eq!(v["differences"][0]["kind"], "missing-profile");
        assert_eq!(v["differences"][0]["id"], 14);
    }

    /// What a real GPU's NVML answered, as the GPU check kit recorded it
    /// (`fixtures/real/<model>/mig-profiles.json`, the `tables` NVML reported).
    fn recorded_tables() -> Vec<(String, String, Vec<ReportedProfile>)> {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/real");
        let mut out = Vec::new();
        for dir in std::fs::read_dir(&root).unwrap() {
            let file = dir.unwrap().path().join("mig-profiles.json");
            let Ok(text) = std::fs::read_to_string(&file) else {
                continue;
            };
            let v: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert_eq!(v["source"], "nvml", "{}", file.display());
            for t in v["tables"].as_array().unwrap() {
                let profiles = t["profiles"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|p| {
                        let n = |k: &str| p[k].as_u64().unwrap();
                        let placements: Vec<Placement> = p["placements"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .map(|x| Placement {
                                start: x["start"].as_u64().unwrap() as u32,
                                size: x["size"].as_u64().unwrap() as u32,
                            })
                            .collect();
                        ReportedProfile {
                            id: n("id") as u32,
                            index: n("index") as u32,
                            name: p["name"].as_str().map(str::to_string),
                            compute_slices: n("compute_slices") as u32,
                            memory_slices: ReportedProfile::memory_slices_of(&placements),
                            memory_mib: n("memory_mib"),
                            max_count: n("max_count") as u32,
                            placements,
                        }
                    })
                    .collect();
                let name = t["name"].as_str().unwrap().to_string();
                out.push((file.display().to_string(), name, profiles));
            }
        }
        out
    }

    #[test]
    fn every_recorded_real_gpu_matches_its_builtin_table() {
        let tables = recorded_tables();
        assert!(
            tables.iter().any(|(_, n, _)| n == "NVIDIA H200"),
            "{tables:?}"
        );
        for (file, name, profiles) in tables {
            let c = compare(&name, &profiles);
            assert!(c.matches(), "{file} ({name}): {c}");
        }
    }

    #[test]
    fn the_h200_recording_differs_from_a_table_derived_from_one_memory_slice() {
        // What the kit found on the H200 before its measured sizes were added: the derived
        // 1g and 2g sizes are more than the tolerance above NVML's.
        let (_, _, mut profiles) = recorded_tables()
            .into_iter()
            .find(|(_, n, _)| n == "NVIDIA H200")
            .unwrap();
        let derived = 17792 * row(&mut profiles, 19).memory_slices.unwrap() as u64;
        assert!(derived as f64 > 16384.0 * (1.0 + MEMORY_TOLERANCE));
        row(&mut profiles, 19).memory_mib = derived;
        let c = compare("NVIDIA H200", &profiles);
        assert!(!c.matches(), "{c}");
    }
}
