//! GPU models and their MIG profile tables, and a checker for MIG layouts.
//!
//! Facts come from NVIDIA's MIG user guide (see `shared/reference/mig-profiles.md`): profiles are
//! keyed by *profile id* (the number `nvidia-smi` shows and create calls take), never by name;
//! placements are counted on the memory-slice axis (8 slots on 7-compute-slice GPUs, 4 on A30);
//! at most one media-extension (`+me`) instance per GPU.
//!
//! Per-profile memory sizes are derived from the model's memory slice size and are approximate
//! until checked against a real GPU's `nvmlDeviceGetGpuInstanceProfileInfo` (`tessera mig
//! profiles`, [`crate::mig::profile_compare`]); where a real GPU's answer was recorded
//! (`fixtures/real/`), the model carries the measured sizes instead (H200: NVML reports 16,384 MiB
//! for a 1g.18gb, 8% less than an eighth of its memory, so a derived size would let the planner
//! place a workload where it cannot fit). Placements and counts are exact per the user guide. H200
//! and B200 placements are assumed equal to H100's (the H200 recording agrees).
//!
//! This module is pure data and pure functions: it never calls NVML.

use std::sync::OnceLock;

use crate::model::Placement;

/// One GPU instance profile of one GPU model.
#[derive(Debug, Clone, PartialEq)]
pub struct MigProfile {
    /// Profile id (`info.id`; 19 = 1g, 20 = 1g+me, 15 = 1g with 2 memory slices, 14 = 2g, 9 = 3g,
    /// 5 = 4g, 0 = 7g on 8-slot GPUs).
    pub id: u32,
    /// NVML profile *index* (`NVML_GPU_INSTANCE_PROFILE_*`) used to query the profile's info.
    pub index: u32,
    /// Name on this SKU, e.g. `1g.10gb`.
    pub name: String,
    pub compute_slices: u32,
    pub memory_slices: u32,
    pub memory_bytes: u64,
    /// Maximum number of instances of this profile on one GPU.
    pub max_count: u32,
    /// Legal start slots; every placement has size `memory_slices`.
    pub placement_starts: Vec<u32>,
    /// Whether the profile carries the media extensions (`+me`): at most one per GPU.
    pub media_extensions: bool,
}

impl MigProfile {
    /// Every legal placement of this profile.
    pub fn placements(&self) -> impl Iterator<Item = Placement> + '_ {
        self.placement_starts.iter().map(|&start| Placement {
            start,
            size: self.memory_slices,
        })
    }
}

/// A GPU model the simulator can model and the planner can plan for.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuModel {
    /// Short key used in scenario files and plans, e.g. `H100-80GB`.
    pub key: &'static str,
    /// Product name as NVML reports it.
    pub nvml_name: &'static str,
    /// PCI device id with the vendor in the low 16 bits (`0x233010DE`), as NVML's
    /// `pciDeviceId` and nvidia-mig-parted's `device-filter` write it.
    pub pci_device_id: u32,
    pub memory_total_bytes: u64,
    pub power_limit_watts: f64,
    pub idle_power_watts: f64,
    pub max_sm_clock_mhz: u32,
    pub idle_sm_clock_mhz: u32,
    pub memory_clock_mhz: u32,
    /// Whether GPM (SM activity/occupancy) exists: Hopper and later.
    pub gpm: bool,
    /// Slots on the placement axis (8, or 4 on A30).
    pub memory_slots: u32,
    /// Compute slices of the whole GPU (7, or 4 on A30).
    pub compute_slices: u32,
    /// MIG profiles; empty for GPUs without MIG.
    pub profiles: Vec<MigProfile>,
}

impl GpuModel {
    /// Whether the model supports MIG.
    pub fn supports_mig(&self) -> bool {
        !self.profiles.is_empty()
    }

    /// The profile with this id.
    pub fn profile(&self, id: u32) -> Option<&MigProfile> {
        self.profiles.iter().find(|p| p.id == id)
    }

    /// The profile with this name (`3g.40gb`) on this SKU.
    pub fn profile_by_name(&self, name: &str) -> Option<&MigProfile> {
        self.profiles.iter().find(|p| p.name == name)
    }

    /// The profile whose NVML profile index is `index`.
    pub fn profile_by_index(&self, index: u32) -> Option<&MigProfile> {
        self.profiles.iter().find(|p| p.index == index)
    }
}

const MIB: u64 = 1024 * 1024;

/// Profile index constants from nvml.h.
pub mod profile_index {
    pub const SLICE_1: u32 = 0x0;
    pub const SLICE_2: u32 = 0x1;
    pub const SLICE_3: u32 = 0x2;
    pub const SLICE_4: u32 = 0x3;
    pub const SLICE_7: u32 = 0x4;
    pub const SLICE_1_REV1: u32 = 0x7;
    pub const SLICE_2_REV1: u32 = 0x8;
    pub const SLICE_1_REV2: u32 = 0x9;
    /// One past the largest profile index NVML defines (`NVML_GPU_INSTANCE_PROFILE_COUNT`).
    pub const COUNT: u32 = 0xE;
}

/// Memory labels of the 8-slot profiles, in the order 1g, 1g (2 slices), 2g, 3g, 4g, 7g.
struct EightSlot {
    key: &'static str,
    nvml_name: &'static str,
    pci_device_id: u32,
    total_mib: u64,
    slice_mib: u64,
    /// Memory of a profile of 1, 2, 4 and 8 memory slices as a real GPU's NVML reports it, where
    /// one was recorded; otherwise `slice_mib` times the slices.
    measured_mib: Option<[u64; 4]>,
    labels: [&'static str; 6],
    power: f64,
    idle_power: f64,
    sm_clock: u32,
    mem_clock: u32,
    gpm: bool,
}

fn eight_slot(m: EightSlot) -> GpuModel {
    use profile_index::*;
    let [l1, l1x2, l2, l3, l4, l7] = m.labels;
    // (id, index, name, compute, memory slices, max count, starts, +me)
    type Row = (u32, u32, String, u32, u32, u32, Vec<u32>, bool);
    let rows: [Row; 7] = [
        (
            19,
            SLICE_1,
            format!("1g.{l1}"),
            1,
            1,
            7,
            (0..7).collect(),
            false,
        ),
        (
            20,
            SLICE_1_REV1,
            format!("1g.{l1}+me"),
            1,
            1,
            1,
            (0..7).collect(),
            true,
        ),
        (
            15,
            SLICE_1_REV2,
            format!("1g.{l1x2}"),
            1,
            2,
            4,
            vec![0, 2, 4, 6],
            false,
        ),
        (
            14,
            SLICE_2,
            format!("2g.{l2}"),
            2,
            2,
            3,
            vec![0, 2, 4],
            false,
        ),
        (9, SLICE_3, format!("3g.{l3}"), 3, 4, 2, vec![0, 4], false),
        (5, SLICE_4, format!("4g.{l4}"), 4, 4, 1, vec![0], false),
        (0, SLICE_7, format!("7g.{l7}"), 7, 8, 1, vec![0], false),
    ];
    let profiles = rows
        .into_iter()
        .map(
            |(id, index, name, compute_slices, memory_slices, max_count, starts, me)| MigProfile {
                id,
                index,
                name,
                compute_slices,
                memory_slices,
                memory_bytes: memory_mib(&m, memory_slices) * MIB,
                max_count,
                placement_starts: starts,
                media_extensions: me,
            },
        )
        .collect();
    GpuModel {
        key: m.key,
        nvml_name: m.nvml_name,
        pci_device_id: m.pci_device_id,
        memory_total_bytes: m.total_mib * MIB,
        power_limit_watts: m.power,
        idle_power_watts: m.idle_power,
        max_sm_clock_mhz: m.sm_clock,
        idle_sm_clock_mhz: 345,
        memory_clock_mhz: m.mem_clock,
        gpm: m.gpm,
        memory_slots: 8,
        compute_slices: 7,
        profiles,
    }
}

/// A profile's memory in MiB: the measured size where the model has one, else derived.
fn memory_mib(m: &EightSlot, memory_slices: u32) -> u64 {
    let measured = m.measured_mib.and_then(|sizes| {
        let i = match memory_slices {
            1 => 0,
            2 => 1,
            4 => 2,
            8 => 3,
            _ => return None,
        };
        Some(sizes[i])
    });
    measured.unwrap_or(m.slice_mib * memory_slices as u64)
}

fn a30() -> GpuModel {
    use profile_index::*;
    let p =
        |id, index, name: &str, compute_slices, memory_slices, max_count, starts: Vec<u32>, me| {
            MigProfile {
                id,
                index,
                name: name.to_string(),
                compute_slices,
                memory_slices,
                memory_bytes: 5836 * memory_slices as u64 * MIB,
                max_count,
                placement_starts: starts,
                media_extensions: me,
            }
        };
    GpuModel {
        key: "A30-24GB",
        nvml_name: "NVIDIA A30",
        pci_device_id: 0x20B7_10DE,
        memory_total_bytes: 24576 * MIB,
        power_limit_watts: 165.0,
        idle_power_watts: 30.0,
        max_sm_clock_mhz: 1440,
        idle_sm_clock_mhz: 210,
        memory_clock_mhz: 1215,
        gpm: false,
        memory_slots: 4,
        compute_slices: 4,
        profiles: vec![
            p(14, SLICE_1, "1g.6gb", 1, 1, 4, vec![0, 1, 2, 3], false),
            p(
                21,
                SLICE_1_REV1,
                "1g.6gb+me",
                1,
                1,
                1,
                vec![0, 1, 2, 3],
                true,
            ),
            p(5, SLICE_2, "2g.12gb", 2, 2, 2, vec![0, 2], false),
            p(6, SLICE_2_REV1, "2g.12gb+me", 2, 2, 1, vec![0, 2], true),
            p(0, SLICE_4, "4g.24gb", 4, 4, 1, vec![0], false),
        ],
    }
}

/// Every GPU model tessera knows.
pub fn models() -> &'static [GpuModel] {
    static MODELS: OnceLock<Vec<GpuModel>> = OnceLock::new();
    MODELS.get_or_init(|| {
        [ampere(), hopper(), blackwell()]
            .into_iter()
            .flatten()
            .collect()
    })
}

/// The Ampere models: A100 (40 and 80 GB) and A30.
fn ampere() -> Vec<GpuModel> {
    vec![
        eight_slot(EightSlot {
            key: "A100-40GB",
            nvml_name: "NVIDIA A100-SXM4-40GB",
            pci_device_id: 0x20B0_10DE,
            total_mib: 40960,
            slice_mib: 4864,
            measured_mib: None,
            labels: ["5gb", "10gb", "10gb", "20gb", "20gb", "40gb"],
            power: 400.0,
            idle_power: 55.0,
            sm_clock: 1410,
            mem_clock: 1215,
            gpm: false,
        }),
        eight_slot(EightSlot {
            key: "A100-80GB",
            nvml_name: "NVIDIA A100-SXM4-80GB",
            pci_device_id: 0x20B2_10DE,
            total_mib: 81920,
            slice_mib: 9856,
            measured_mib: None,
            labels: ["10gb", "20gb", "20gb", "40gb", "40gb", "80gb"],
            power: 400.0,
            idle_power: 60.0,
            sm_clock: 1410,
            mem_clock: 1593,
            gpm: false,
        }),
        a30(),
    ]
}

/// The Hopper models: H100 (80 GB and NVL), GH200 and H200.
fn hopper() -> Vec<GpuModel> {
    vec![
        eight_slot(EightSlot {
            key: "H100-80GB",
            nvml_name: "NVIDIA H100 80GB HBM3",
            pci_device_id: 0x2330_10DE,
            total_mib: 81559,
            slice_mib: 9856,
            measured_mib: None,
            labels: ["10gb", "20gb", "20gb", "40gb", "40gb", "80gb"],
            power: 700.0,
            idle_power: 70.0,
            sm_clock: 1980,
            mem_clock: 2619,
            gpm: true,
        }),
        eight_slot(EightSlot {
            key: "H100-94GB-NVL",
            nvml_name: "NVIDIA H100 NVL",
            pci_device_id: 0x2321_10DE,
            total_mib: 95830,
            slice_mib: 11520,
            measured_mib: None,
            labels: ["12gb", "24gb", "24gb", "47gb", "47gb", "94gb"],
            power: 400.0,
            idle_power: 60.0,
            sm_clock: 1785,
            mem_clock: 2619,
            gpm: true,
        }),
        eight_slot(EightSlot {
            key: "GH200-96GB",
            nvml_name: "NVIDIA GH200 480GB",
            pci_device_id: 0x2342_10DE,
            total_mib: 97871,
            slice_mib: 11776,
            measured_mib: None,
            labels: ["12gb", "24gb", "24gb", "48gb", "48gb", "96gb"],
            power: 900.0,
            idle_power: 90.0,
            sm_clock: 1980,
            mem_clock: 2619,
            gpm: true,
        }),
        eight_slot(EightSlot {
            key: "H200-141GB",
            nvml_name: "NVIDIA H200",
            pci_device_id: 0x2335_10DE,
            total_mib: 143771,
            slice_mib: 17792,
            // fixtures/real/nvidia-h200/mig-profiles.json (driver 580.159.04)
            measured_mib: Some([16384, 33280, 71424, 143360]),
            labels: ["18gb", "35gb", "35gb", "71gb", "71gb", "141gb"],
            power: 700.0,
            idle_power: 75.0,
            sm_clock: 1980,
            mem_clock: 3201,
            gpm: true,
        }),
    ]
}

/// The Blackwell models: B200.
fn blackwell() -> Vec<GpuModel> {
    vec![eight_slot(EightSlot {
        key: "B200-180GB",
        nvml_name: "NVIDIA B200",
        pci_device_id: 0x2901_10DE,
        total_mib: 183359,
        slice_mib: 22784,
        measured_mib: None,
        labels: ["23gb", "45gb", "45gb", "90gb", "90gb", "180gb"],
        power: 1000.0,
        idle_power: 120.0,
        sm_clock: 1965,
        mem_clock: 3996,
        gpm: true,
    })]
}

/// The model with this key (`H100-80GB`), case-insensitively.
pub fn model(key: &str) -> Option<&'static GpuModel> {
    models().iter().find(|m| m.key.eq_ignore_ascii_case(key))
}

/// The model whose NVML product name is `nvml_name`.
pub fn model_by_nvml_name(nvml_name: &str) -> Option<&'static GpuModel> {
    models().iter().find(|m| m.nvml_name == nvml_name)
}

/// One GPU instance of a layout: a profile at a placement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayoutInstance {
    pub profile_id: u32,
    pub placement: Placement,
}

/// Why a MIG layout is not legal on a GPU model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    #[error("{model} does not support MIG")]
    NoMig { model: String },
    #[error("profile id {profile_id} does not exist on {model}")]
    UnknownProfile { model: String, profile_id: u32 },
    #[error(
        "profile {profile} cannot be placed at {{start: {start}, size: {size}}} on {model}; legal starts are {legal:?} with size {legal_size}"
    )]
    BadPlacement {
        model: String,
        profile: String,
        start: u32,
        size: u32,
        legal: Vec<u32>,
        legal_size: u32,
    },
    #[error("placements {a:?} and {b:?} overlap")]
    Overlap { a: Placement, b: Placement },
    #[error("{count} instances of {profile} exceed its maximum of {max} on {model}")]
    TooMany {
        model: String,
        profile: String,
        count: u32,
        max: u32,
    },
    #[error("{count} media-extension (+me) instances; a GPU has at most one")]
    TooManyMediaExtensions { count: u32 },
    #[error("layout uses {used} compute slices; {model} has {max}")]
    TooManyComputeSlices { model: String, used: u32, max: u32 },
}

/// Check that a layout is legal on `model`: known profiles, legal placements, no overlap, max
/// counts, at most one `+me` instance, and compute slices within the GPU's.
pub fn validate_layout(model: &GpuModel, layout: &[LayoutInstance]) -> Result<(), LayoutError> {
    if !model.supports_mig() {
        return Err(LayoutError::NoMig {
            model: model.key.into(),
        });
    }
    let mut me = 0;
    let mut compute = 0;
    for (i, inst) in layout.iter().enumerate() {
        let profile =
            model
                .profile(inst.profile_id)
                .ok_or_else(|| LayoutError::UnknownProfile {
                    model: model.key.into(),
                    profile_id: inst.profile_id,
                })?;
        if inst.placement.size != profile.memory_slices
            || !profile.placement_starts.contains(&inst.placement.start)
        {
            return Err(LayoutError::BadPlacement {
                model: model.key.into(),
                profile: profile.name.clone(),
                start: inst.placement.start,
                size: inst.placement.size,
                legal: profile.placement_starts.clone(),
                legal_size: profile.memory_slices,
            });
        }
        if let Some(other) = layout[..i]
            .iter()
            .find(|o| o.placement.overlaps(&inst.placement))
        {
            return Err(LayoutError::Overlap {
                a: other.placement,
                b: inst.placement,
            });
        }
        me += profile.media_extensions as u32;
        compute += profile.compute_slices;
    }
    for profile in &model.profiles {
        let count = layout.iter().filter(|i| i.profile_id == profile.id).count() as u32;
        if count > profile.max_count {
            return Err(LayoutError::TooMany {
                model: model.key.into(),
                profile: profile.name.clone(),
                count,
                max: profile.max_count,
            });
        }
    }
    if me > 1 {
        return Err(LayoutError::TooManyMediaExtensions { count: me });
    }
    if compute > model.compute_slices {
        return Err(LayoutError::TooManyComputeSlices {
            model: model.key.into(),
            used: compute,
            max: model.compute_slices,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inst(profile_id: u32, start: u32, size: u32) -> LayoutInstance {
        LayoutInstance {
            profile_id,
            placement: Placement { start, size },
        }
    }

    #[test]
    fn names_follow_the_sku() {
        let a40 = model("A100-40GB").unwrap();
        assert_eq!(a40.profile(19).unwrap().name, "1g.5gb");
        assert_eq!(a40.profile(15).unwrap().name, "1g.10gb");
        let h200 = model("h200-141gb").unwrap();
        assert_eq!(h200.profile(0).unwrap().name, "7g.141gb");
        assert_eq!(h200.profile_by_name("3g.71gb").unwrap().id, 9);
        assert_eq!(
            model("A30-24GB").unwrap().profile(0).unwrap().name,
            "4g.24gb"
        );
    }

    #[test]
    fn legal_layouts_pass() {
        let h = model("H100-80GB").unwrap();
        let seven_1g: Vec<_> = (0..7).map(|s| inst(19, s, 1)).collect();
        validate_layout(h, &seven_1g).unwrap();
        validate_layout(h, &[inst(5, 0, 4), inst(9, 4, 4)]).unwrap();
        validate_layout(h, &[inst(9, 0, 4), inst(14, 4, 2), inst(19, 6, 1)]).unwrap();
        validate_layout(h, &[inst(0, 0, 8)]).unwrap();
        validate_layout(h, &[]).unwrap();
    }

    #[test]
    fn illegal_layouts_fail_with_the_rule_broken() {
        let h = model("H100-80GB").unwrap();
        assert!(matches!(
            validate_layout(h, &[inst(9, 2, 4)]),
            Err(LayoutError::BadPlacement { .. })
        ));
        assert!(matches!(
            validate_layout(h, &[inst(9, 0, 4), inst(19, 3, 1)]),
            Err(LayoutError::Overlap { .. })
        ));
        assert!(matches!(
            validate_layout(h, &[inst(20, 0, 1), inst(20, 1, 1)]),
            Err(LayoutError::TooMany { .. })
        ));
        assert!(matches!(
            validate_layout(h, &[inst(42, 0, 1)]),
            Err(LayoutError::UnknownProfile { .. })
        ));
        // 1g at slot 7 is not a legal start: 7 compute slices cap the 1g count.
        assert!(matches!(
            validate_layout(h, &[inst(19, 7, 1)]),
            Err(LayoutError::BadPlacement { .. })
        ));
        let a30 = model("A30-24GB").unwrap();
        assert!(matches!(
            validate_layout(a30, &[inst(21, 0, 1), inst(6, 2, 2)]),
            Err(LayoutError::TooManyMediaExtensions { count: 2 })
        ));
    }

    /// The reference counts 722 legal non-empty explicit-placement layouts on an 8-slot GPU (id 15
    /// Every (profile, placement) of a model, media-extension profiles excluded.
    fn placed_instances(m: &GpuModel) -> Vec<LayoutInstance> {
        m.profiles
            .iter()
            .filter(|p| !p.media_extensions)
            .flat_map(|p| {
                p.placements().map(move |pl| LayoutInstance {
                    profile_id: p.id,
                    placement: pl,
                })
            })
            .collect()
    }

    /// included, +me excluded); enumerating every subset through the checker must find exactly those.
    #[test]
    fn enumerates_the_published_number_of_layouts() {
        let h = model("H100-80GB").unwrap();
        let all = placed_instances(h);
        fn count(
            h: &GpuModel,
            all: &[LayoutInstance],
            from: usize,
            cur: &mut Vec<LayoutInstance>,
        ) -> usize {
            let mut n = 0;
            for i in from..all.len() {
                cur.push(all[i]);
                if validate_layout(h, cur).is_ok() {
                    n += 1 + count(h, all, i + 1, cur);
                }
                cur.pop();
            }
            n
        }
        let n = count(h, &all, 0, &mut Vec::new());
        assert_eq!(
            n, 722,
            "the MIG user guide's geometry gives 722 placed layouts"
        );
    }

    /// The reference's 77 distinct profile mixes (non-empty, id 15 included, +me excluded), and
    /// the same count on every 8-slot model (H200 and B200 placements are assumed equal to H100's).
    #[test]
    fn enumerates_the_published_number_of_profile_mixes() {
        for m in models().iter().filter(|m| m.memory_slots == 8) {
            let all = placed_instances(m);
            fn walk(
                m: &GpuModel,
                all: &[LayoutInstance],
                from: usize,
                cur: &mut Vec<LayoutInstance>,
                mixes: &mut std::collections::BTreeSet<Vec<u32>>,
            ) {
                for i in from..all.len() {
                    cur.push(all[i]);
                    if validate_layout(m, cur).is_ok() {
                        let mut ids: Vec<u32> = cur.iter().map(|x| x.profile_id).collect();
                        ids.sort_unstable();
                        mixes.insert(ids);
                        walk(m, all, i + 1, cur, mixes);
                    }
                    cur.pop();
                }
            }
            let mut mixes = std::collections::BTreeSet::new();
            walk(m, &all, 0, &mut Vec::new(), &mut mixes);
            assert_eq!(mixes.len(), 77, "{}", m.key);
        }
    }

    /// Profile ids, slices, counts, starts and names per SKU, as in the reference tables.
    #[test]
    fn tables_match_the_reference() {
        // (id, compute, memory slices, max count, starts)
        let eight: [(u32, u32, u32, u32, &[u32]); 7] = [
            (19, 1, 1, 7, &[0, 1, 2, 3, 4, 5, 6]),
            (20, 1, 1, 1, &[0, 1, 2, 3, 4, 5, 6]),
            (15, 1, 2, 4, &[0, 2, 4, 6]),
            (14, 2, 2, 3, &[0, 2, 4]),
            (9, 3, 4, 2, &[0, 4]),
            (5, 4, 4, 1, &[0]),
            (0, 7, 8, 1, &[0]),
        ];
        let names: [(&str, [&str; 7]); 7] = [
            (
                "A100-40GB",
                [
                    "1g.5gb",
                    "1g.5gb+me",
                    "1g.10gb",
                    "2g.10gb",
                    "3g.20gb",
                    "4g.20gb",
                    "7g.40gb",
                ],
            ),
            (
                "A100-80GB",
                [
                    "1g.10gb",
                    "1g.10gb+me",
                    "1g.20gb",
                    "2g.20gb",
                    "3g.40gb",
                    "4g.40gb",
                    "7g.80gb",
                ],
            ),
            (
                "H100-80GB",
                [
                    "1g.10gb",
                    "1g.10gb+me",
                    "1g.20gb",
                    "2g.20gb",
                    "3g.40gb",
                    "4g.40gb",
                    "7g.80gb",
                ],
            ),
            (
                "H100-94GB-NVL",
                [
                    "1g.12gb",
                    "1g.12gb+me",
                    "1g.24gb",
                    "2g.24gb",
                    "3g.47gb",
                    "4g.47gb",
                    "7g.94gb",
                ],
            ),
            (
                "GH200-96GB",
                [
                    "1g.12gb",
                    "1g.12gb+me",
                    "1g.24gb",
                    "2g.24gb",
                    "3g.48gb",
                    "4g.48gb",
                    "7g.96gb",
                ],
            ),
            (
                "H200-141GB",
                [
                    "1g.18gb",
                    "1g.18gb+me",
                    "1g.35gb",
                    "2g.35gb",
                    "3g.71gb",
                    "4g.71gb",
                    "7g.141gb",
                ],
            ),
            (
                "B200-180GB",
                [
                    "1g.23gb",
                    "1g.23gb+me",
                    "1g.45gb",
                    "2g.45gb",
                    "3g.90gb",
                    "4g.90gb",
                    "7g.180gb",
                ],
            ),
        ];
        for (key, ns) in names {
            let m = model(key).unwrap();
            assert_eq!((m.memory_slots, m.compute_slices), (8, 7), "{key}");
            assert_eq!(m.profiles.len(), 7, "{key}");
            for ((id, c, mem, max, starts), name) in eight.iter().zip(ns) {
                let p = m.profile(*id).unwrap();
                assert_eq!(p.name, name, "{key} id {id}");
                assert_eq!(
                    (
                        p.compute_slices,
                        p.memory_slices,
                        p.max_count,
                        p.placement_starts.as_slice()
                    ),
                    (*c, *mem, *max, *starts),
                    "{key} {name}"
                );
                assert_eq!(p.media_extensions, *id == 20, "{key} {name}");
                // Memory grows with memory slices and never exceeds the GPU's.
                assert!(p.memory_bytes <= m.memory_total_bytes, "{key} {name}");
            }
        }
        // Profile indices (nvml.h) vs ids.
        let h = model("H100-80GB").unwrap();
        for (id, index) in [
            (19, 0x0),
            (20, 0x7),
            (15, 0x9),
            (14, 0x1),
            (9, 0x2),
            (5, 0x3),
            (0, 0x4),
        ] {
            assert_eq!(h.profile(id).unwrap().index, index, "id {id}");
        }
        let a30 = model("A30-24GB").unwrap();
        assert_eq!((a30.memory_slots, a30.compute_slices), (4, 4));
        type A30Row<'a> = (&'a str, u32, u32, u32, &'a [u32], bool);
        let a30_rows: [A30Row; 5] = [
            ("1g.6gb", 1, 1, 4, &[0, 1, 2, 3], false),
            ("1g.6gb+me", 1, 1, 1, &[0, 1, 2, 3], true),
            ("2g.12gb", 2, 2, 2, &[0, 2], false),
            ("2g.12gb+me", 2, 2, 1, &[0, 2], true),
            ("4g.24gb", 4, 4, 1, &[0], false),
        ];
        for (name, c, mem, max, starts, me) in a30_rows {
            let p = a30.profile_by_name(name).unwrap();
            assert_eq!(
                (
                    p.compute_slices,
                    p.memory_slices,
                    p.max_count,
                    p.placement_starts.as_slice(),
                    p.media_extensions
                ),
                (c, mem, max, starts, me),
                "{name}"
            );
        }
        // One +me per GPU on A30 too, and a full A30 layout is legal.
        validate_layout(a30, &[inst(14, 0, 1), inst(14, 1, 1), inst(5, 2, 2)]).unwrap();
        assert!(validate_layout(a30, &[inst(0, 0, 4), inst(14, 0, 1)]).is_err());
    }
}
