//! Unit and property tests of the planner.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use tessera_core::mig::parted::{Devices, PartedFile};
use tessera_core::mig::plan::TesseraPlan;
use tessera_core::mig::{self, validate_layout};

use super::*;

const GIB: u64 = 1 << 30;

fn wl(id: &str, gib: f64, slices: u32) -> Workload {
    Workload {
        id: id.into(),
        node: Some("n1".into()),
        current_gpu: None,
        memory_bytes: (gib * GIB as f64) as u64,
        compute_slices: slices,
    }
}

fn fleet(node: &str, model: &str, n: u32) -> Vec<FleetGpu> {
    (0..n)
        .map(|i| FleetGpu {
            node: node.into(),
            index: i,
            uuid: Some(format!("GPU-{node}-{i}")),
            model: model.into(),
        })
        .collect()
}

/// Every emitted layout is legal, every workload is placed once or reported.
fn check_plan(plan: &Proposal, n: usize) {
    let mut seen = vec![0; n];
    for g in &plan.gpus {
        let model = mig::model(g.model).unwrap();
        validate_layout(model, &g.layout()).unwrap_or_else(|e| panic!("{e}: {g:?}"));
        let profs: Vec<&MigProfile> = g
            .instances
            .iter()
            .map(|i| model.profile(i.profile_id).unwrap())
            .collect();
        assert_eq!(g.mig_enabled, !is_whole_gpu(model, &profs), "{g:?}");
        for i in &g.instances {
            for &w in &i.workloads {
                seen[w] += 1;
            }
        }
    }
    for u in &plan.unplaceable {
        seen[u.workload] += 1;
    }
    assert!(
        seen.iter().all(|&c| c == 1),
        "each workload placed or reported exactly once: {seen:?}"
    );
    assert!(plan.gpus_used >= plan.lower_bound);
    assert_eq!(plan.gpus_used as usize, plan.gpus.len());
}

#[test]
fn smallest_profile_follows_memory_then_compute() {
    let h = mig::model("H100-80GB").unwrap();
    let id = |mem_gib: f64, c| {
        smallest_profile(h, (mem_gib * GIB as f64) as u64, c).map(|i| h.profiles[i].id)
    };
    assert_eq!(id(5.0, 1), Some(19));
    // 15 GiB with one slice: the 1g with two memory slices, not a 2g.
    assert_eq!(id(15.0, 1), Some(15));
    assert_eq!(id(15.0, 2), Some(14));
    assert_eq!(id(5.0, 3), Some(9));
    assert_eq!(id(5.0, 4), Some(5));
    assert_eq!(id(50.0, 1), Some(0));
    assert_eq!(id(90.0, 1), None);
    // +me profiles are never chosen.
    assert!((1..=7).all(|c| id(1.0, c) != Some(20)));
}

#[test]
fn packs_seven_small_workloads_on_one_gpu() {
    let ws: Vec<Workload> = (0..7).map(|i| wl(&format!("w{i}"), 4.0, 1)).collect();
    let plan = plan(
        &ws,
        &fleet("n1", "H100-80GB", 3),
        &PlannerOptions::default(),
    )
    .unwrap();
    check_plan(&plan, 7);
    assert_eq!(plan.gpus_used, 1);
    assert_eq!(plan.lower_bound, 1);
    assert_eq!(plan.method, Method::Exact);
    assert_eq!(plan.free_gpus.len(), 2);
    // An eighth 1g does not fit: a 1g cannot start at slot 7.
    let ws: Vec<Workload> = (0..8).map(|i| wl(&format!("w{i}"), 4.0, 1)).collect();
    let plan = super::plan(
        &ws,
        &fleet("n1", "H100-80GB", 3),
        &PlannerOptions::default(),
    )
    .unwrap();
    check_plan(&plan, 8);
    assert_eq!(plan.gpus_used, 2);
}

#[test]
fn lower_bound_counts_memory_and_compute_slices() {
    // 3 × 3g (4 slots, 3 slices) + 2 × 1g: slots 14 → 2, slices 11 → 2, and 2 GPUs suffice.
    let mut ws: Vec<Workload> = (0..3).map(|i| wl(&format!("big{i}"), 30.0, 3)).collect();
    ws.push(wl("s0", 4.0, 1));
    ws.push(wl("s1", 4.0, 1));
    let p3 = plan(
        &ws,
        &fleet("n1", "H100-80GB", 4),
        &PlannerOptions::default(),
    )
    .unwrap();
    check_plan(&p3, 5);
    assert_eq!((p3.lower_bound, p3.gpus_used), (2, 2));
    assert_eq!(p3.gap(), 0.0);
    // 3 × 4g (4 slots, 4 slices) + 2 × 1g: slots 14 → 2, slices 14 → 2.
    let mut ws: Vec<Workload> = (0..3).map(|i| wl(&format!("big{i}"), 30.0, 4)).collect();
    ws.push(wl("s0", 4.0, 1));
    ws.push(wl("s1", 4.0, 1));
    let plan = plan(
        &ws,
        &fleet("n1", "H100-80GB", 4),
        &PlannerOptions::default(),
    )
    .unwrap();
    check_plan(&plan, 5);
    assert_eq!(plan.lower_bound, 2);
    // A GPU holds one 4g only, so a third GPU is needed: the bound is not tight.
    assert_eq!(plan.gpus_used, 3);
    assert_eq!(plan.method, Method::Exact);
    assert!((plan.gap() - 0.5).abs() < 1e-9);
    assert_eq!(plan.per_model.len(), 1);
    assert_eq!(plan.per_model[0].memory_slices, 14);
    assert_eq!(plan.per_model[0].compute_slices, 14);
}

#[test]
fn exact_beats_first_fit_on_a_crafted_case() {
    // FFD by memory: 2g(20 GiB) items first, then 1g-heavy ones, leaving holes; exact finds the bound.
    let mut ws = Vec::new();
    for i in 0..3 {
        ws.push(wl(&format!("a{i}"), 18.0, 2)); // 2g.20gb
    }
    for i in 0..4 {
        ws.push(wl(&format!("b{i}"), 35.0, 1)); // 3g.40gb (4 slots, memory bound)
    }
    for i in 0..3 {
        ws.push(wl(&format!("c{i}"), 8.0, 1)); // 1g.10gb
    }
    let f = fleet("n1", "H100-80GB", 8);
    let exact = plan(&ws, &f, &PlannerOptions::default()).unwrap();
    check_plan(&exact, ws.len());
    assert_eq!(exact.method, Method::Exact);
    let (ffd, left) = first_fit_decreasing_by_memory(&ws, &f).unwrap();
    assert_eq!(left, 0);
    assert!(exact.gpus_used <= ffd);
    // 16 + 6 + 3 = 25 slots → ≥ 4 GPUs; slices 6 + 12 + 3 = 21 → 3.
    assert_eq!(exact.lower_bound, 4);
}

#[test]
fn exact_and_heuristic_agree_on_small_cases_or_exact_is_better() {
    let mut rng = 7u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for _ in 0..20 {
        let n = 4 + (next() % 8) as usize;
        let ws: Vec<Workload> = (0..n)
            .map(|i| {
                wl(
                    &format!("w{i}"),
                    1.0 + (next() % 40) as f64,
                    1 + (next() % 4) as u32,
                )
            })
            .collect();
        let f = fleet("n1", "A100-80GB", 12);
        let e = plan(&ws, &f, &PlannerOptions::default()).unwrap();
        let h = plan(
            &ws,
            &f,
            &PlannerOptions {
                heuristic_only: true,
                ..PlannerOptions::default()
            },
        )
        .unwrap();
        check_plan(&e, n);
        check_plan(&h, n);
        assert!(e.gpus_used <= h.gpus_used);
        assert_ne!(e.method, Method::Heuristic);
        assert_eq!(h.method, Method::Heuristic);
    }
}

#[test]
fn unplaceable_workloads_are_reported_not_dropped() {
    let ws = vec![
        wl("huge", 200.0, 1),
        wl("ok", 5.0, 1),
        wl("also-ok", 70.0, 7),
    ];
    let plan = plan(
        &ws,
        &fleet("n1", "H100-80GB", 1),
        &PlannerOptions::default(),
    )
    .unwrap();
    check_plan(&plan, 3);
    let ids: Vec<&str> = plan.unplaceable.iter().map(|u| u.id.as_str()).collect();
    assert!(ids.contains(&"huge"));
    let huge = plan.unplaceable.iter().find(|u| u.id == "huge").unwrap();
    assert!(
        huge.reason.contains("no profile holds that"),
        "{}",
        huge.reason
    );
    // One GPU: the 7g and the 1g cannot share it, so one of them is out of room.
    assert_eq!(plan.unplaceable.len(), 2);
    assert!(
        plan.unplaceable.iter().any(|u| u.reason.contains("full")),
        "{:?}",
        plan.unplaceable
    );
}

#[test]
fn non_mig_gpus_are_kept_out() {
    let mut f = fleet("n1", "H100-80GB", 1);
    f.push(FleetGpu {
        node: "n1".into(),
        index: 1,
        uuid: None,
        model: "NVIDIA L4".into(),
    });
    let plan = plan(&[wl("w", 5.0, 1)], &f, &PlannerOptions::default()).unwrap();
    assert_eq!(plan.non_mig_gpus.len(), 1);
    assert_eq!(plan.non_mig_gpus[0].model, "NVIDIA L4");
    assert_eq!(plan.gpus_used, 1);
    let only_l4 = vec![f[1].clone()];
    let plan2 = super::plan(&[wl("w", 5.0, 1)], &only_l4, &PlannerOptions::default()).unwrap();
    assert_eq!(plan2.unplaceable.len(), 1);
    assert!(
        plan2.unplaceable[0]
            .reason
            .contains("no GPU of a MIG-capable model")
    );
}

#[test]
fn bad_inputs_are_errors() {
    let f = fleet("n1", "H100-80GB", 1);
    assert!(matches!(
        plan(
            &[wl("a", 1.0, 1), wl("a", 1.0, 1)],
            &f,
            &PlannerOptions::default()
        ),
        Err(PlannerError::DuplicateWorkload(_))
    ));
    assert!(matches!(
        plan(&[wl("a", 1.0, 0)], &f, &PlannerOptions::default()),
        Err(PlannerError::ZeroCompute { .. })
    ));
    let mut f2 = f.clone();
    f2.push(f[0].clone());
    assert!(matches!(
        plan(&[wl("a", 1.0, 1)], &f2, &PlannerOptions::default()),
        Err(PlannerError::DuplicateGpu { .. })
    ));
}

#[test]
fn mixed_models_use_the_model_where_a_workload_is_smallest() {
    // 20 GiB, 1 slice: 1g.20gb (2 of 8 slots) on H100-80GB, but 4g.24gb (whole GPU) on A30.
    let mut f = fleet("n1", "A30-24GB", 2);
    f.extend(fleet("n2", "H100-80GB", 1).into_iter().map(|mut g| {
        g.index += 10;
        g
    }));
    let ws: Vec<Workload> = (0..3).map(|i| wl(&format!("w{i}"), 17.0, 1)).collect();
    let plan = plan(&ws, &f, &PlannerOptions::default()).unwrap();
    check_plan(&plan, 3);
    assert_eq!(plan.gpus_used, 1);
    assert_eq!(plan.gpus[0].model, "H100-80GB");
}

#[test]
fn placements_keep_large_free_ranges() {
    let h = mig::model("H100-80GB").unwrap();
    let p3 = h.profile(9).unwrap();
    let p1 = h.profile(19).unwrap();
    // One 3g and one 1g: the 1g must share the 3g's other half, keeping a 2g-sized range free.
    let s = best_placement(h, &[p3, p1]).unwrap();
    let used: u32 = (1 << s[1]) | (0b1111 << s[0]);
    assert_eq!(s[0] % 4, 0);
    assert!(
        (0..8).filter(|b| used & (1 << b) == 0).count() == 3,
        "three free slots"
    );
    // The three free slots are contiguous.
    let free: Vec<u32> = (0..8).filter(|b| used & (1 << b) == 0).collect();
    assert_eq!(free[2] - free[0], 2, "{s:?}");
    // Four 1g on an empty GPU leave a 3g (4 contiguous slots) addable.
    let s = best_placement(h, &[p1, p1, p1, p1]).unwrap();
    let used: u32 = s.iter().map(|&x| 1 << x).sum();
    assert!(used & 0b1111 == 0b1111 || used & 0b1111_0000 == 0, "{s:?}");
}

#[test]
fn mig_parted_export_groups_gpus_per_node() {
    let ws: Vec<Workload> = (0..16).map(|i| wl(&format!("w{i}"), 4.0, 1)).collect();
    let mut f = fleet("node-a", "H100-80GB", 2);
    f.extend(fleet("node-b", "H100-80GB", 2));
    let p = plan(&ws, &f, &PlannerOptions::default()).unwrap();
    check_plan(&p, 16);
    let mut file = TesseraPlan::new();
    file.configs.insert("day".into(), export::config(&p, &ws));
    let text = file.to_yaml();
    let back = TesseraPlan::parse(&text, "plan").unwrap();
    assert_eq!(back, file);
    let parted = export::mig_parted(&file.configs);
    let cfg = PartedFile::parse(&parted, "parted").unwrap();
    assert!(cfg.configs.contains_key("day-node-a"), "{parted}");
    assert!(cfg.configs.contains_key("day-node-b"), "{parted}");
    assert_same_layouts(&file, &cfg);
}

/// The mig-parted file and the tessera plan describe the same per-GPU profile counts.
fn assert_same_layouts(plan: &TesseraPlan, cfg: &PartedFile) {
    let nodes: std::collections::BTreeSet<Option<String>> = plan
        .configs
        .values()
        .flatten()
        .map(|g| g.node.clone())
        .collect();
    let mut from_parted: BTreeMap<(String, u32), (bool, BTreeMap<String, u32>)> = BTreeMap::new();
    for (label, entries) in &cfg.configs {
        for e in entries {
            let Devices::Indices(idx) = &e.devices else {
                panic!("tessera writes explicit devices")
            };
            for &i in idx {
                let prev =
                    from_parted.insert((label.clone(), i), (e.mig_enabled, e.mig_devices.clone()));
                assert!(prev.is_none(), "GPU {i} twice in {label}");
            }
        }
    }
    let mut from_plan = BTreeMap::new();
    for (label, gpus) in &plan.configs {
        for g in gpus {
            let l = export::mig_parted_label(label, g.node.as_deref(), nodes.len() > 1);
            from_plan.insert((l, g.gpu), (g.mig_enabled, export::profile_counts(g)));
        }
    }
    assert_eq!(from_plan, from_parted);
}

#[test]
fn the_whole_gpu_profile_is_the_full_one_on_every_model() {
    for m in mig::models().iter().filter(|m| m.supports_mig()) {
        let whole: Vec<&str> = m
            .profiles
            .iter()
            .filter(|p| is_whole_gpu(m, &[p]))
            .map(|p| p.name.as_str())
            .collect();
        let family = if m.key.starts_with("A30") {
            "4g."
        } else {
            "7g."
        };
        assert!(
            !whole.is_empty() && whole.iter().all(|n| n.starts_with(family)),
            "{}: {whole:?}",
            m.key
        );
    }
    let h = mig::model("H100-80GB").unwrap();
    let (p7, p4, p3) = (
        h.profile(0).unwrap(),
        h.profile(5).unwrap(),
        h.profile(9).unwrap(),
    );
    assert!(is_whole_gpu(h, &[p7]));
    assert!(!is_whole_gpu(h, &[p4]), "a 4g alone leaves slices unused");
    assert!(!is_whole_gpu(h, &[p3, p3]));
    assert!(!is_whole_gpu(h, &[]));
}

#[test]
fn a_workload_that_needs_the_whole_gpu_stays_out_of_mig_mode() {
    // 50 GiB needs a 7g.80gb; 7 slices of compute too, whatever the memory; two 3g share a GPU.
    let ws = vec![
        wl("big", 50.0, 1),
        wl("a", 10.0, 3),
        wl("b", 10.0, 3),
        wl("busy", 5.0, 7),
    ];
    let f = fleet("n1", "H100-80GB", 4);
    let p = plan(&ws, &f, &PlannerOptions::default()).unwrap();
    check_plan(&p, ws.len());
    assert_eq!(p.gpus_used, 3, "whole GPUs still count as used");
    let on = |w: usize| {
        p.gpus
            .iter()
            .find(|g| g.instances.iter().any(|i| i.workloads.contains(&w)))
            .unwrap()
    };
    assert!(!on(0).mig_enabled && !on(3).mig_enabled);
    assert!(on(1).mig_enabled && on(2).mig_enabled);
    assert_eq!(
        whole_gpu_sentence(&p).unwrap(),
        "2 GPUs each run one workload that needs the whole GPU: left out of MIG mode (MIG would only cost peer-to-peer and profiling)."
    );
    // The plan file: MIG off, no instances, the workload on the GPU; mig-parted: MIG off.
    let mut file = TesseraPlan::new();
    file.configs.insert("day".into(), export::config(&p, &ws));
    file.validate("plan").unwrap();
    let day = &file.configs["day"];
    let big = day.iter().find(|g| g.gpu == on(0).gpu.index).unwrap();
    assert!(!big.mig_enabled && big.instances.is_empty());
    assert_eq!(big.workloads, vec!["big"]);
    let pair = day.iter().find(|g| g.gpu == on(1).gpu.index).unwrap();
    assert!(pair.mig_enabled && pair.workloads.is_empty() && pair.instances.len() == 2);
    assert_eq!(TesseraPlan::parse(&file.to_yaml(), "plan").unwrap(), file);
    let parted = export::mig_parted(&file.configs);
    let cfg = PartedFile::parse(&parted, "parted").unwrap();
    assert_same_layouts(&file, &cfg);
    assert!(!parted.contains("7g.80gb"), "{parted}");
    // Every fleet GPU but the pair's is MIG off: the whole ones and the free one share an entry.
    let off: Vec<u32> = day
        .iter()
        .filter(|g| !g.mig_enabled)
        .map(|g| g.gpu)
        .collect();
    assert_eq!(off.len(), 3);
    let list: Vec<String> = off.iter().map(u32::to_string).collect();
    assert!(
        parted.contains(&format!(
            "- devices: [{}]\n      mig-enabled: false\n      mig-devices: {{}}",
            list.join(", ")
        )),
        "{parted}"
    );

    // A30: 20 GiB needs its full 4g.24gb (MIG off); two 10 GiB workloads share it as 2g.12gb.
    let f = fleet("n2", "A30-24GB", 2);
    let p = plan(&[wl("w", 20.0, 1)], &f, &PlannerOptions::default()).unwrap();
    assert_eq!(p.gpus.len(), 1);
    assert!(!p.gpus[0].mig_enabled);
    assert_eq!(p.gpus[0].instances[0].profile, "4g.24gb");
    assert_eq!(
        whole_gpu_sentence(&p).unwrap(),
        format!(
            "n2/GPU{} runs one workload that needs the whole GPU: left out of MIG mode (MIG would only cost peer-to-peer and profiling).",
            p.gpus[0].gpu.index
        )
    );
    let ws = vec![wl("x", 10.0, 1), wl("y", 10.0, 1)];
    let p = plan(&ws, &f, &PlannerOptions::default()).unwrap();
    assert!(p.gpus.iter().all(|g| g.mig_enabled));
    assert_eq!(whole_gpu_sentence(&p), None);
}

fn arb_model() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "A100-40GB",
        "A100-80GB",
        "A30-24GB",
        "H100-80GB",
        "H100-94GB-NVL",
        "GH200-96GB",
        "H200-141GB",
        "B200-180GB",
    ])
}

fn arb_case() -> impl Strategy<Value = (Vec<Workload>, Vec<FleetGpu>)> {
    let ws = prop::collection::vec((0.5f64..120.0, 1u32..=7, 0u32..3), 1..40).prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(|(i, (gib, c, node))| Workload {
                id: format!("w{i}"),
                node: Some(format!("n{node}")),
                current_gpu: Some(format!("GPU-n{node}-{}", i % 4)),
                memory_bytes: (gib * GIB as f64) as u64,
                compute_slices: c,
            })
            .collect::<Vec<_>>()
    });
    let fl = prop::collection::vec((arb_model(), 1u32..6), 1..4).prop_map(|v| {
        v.into_iter()
            .enumerate()
            .flat_map(|(n, (m, k))| fleet(&format!("n{n}"), m, k))
            .collect::<Vec<_>>()
    });
    (ws, fl)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Every layout passes the checker; no workload is lost or placed twice; the plan file parses
    /// and the mig-parted export describes the same layouts.
    #[test]
    fn plans_are_legal_complete_and_exported_faithfully((ws, f) in arb_case(), heuristic in any::<bool>()) {
        let opts = PlannerOptions { heuristic_only: heuristic, exact_node_limit: 20_000, ..PlannerOptions::default() };
        let p = plan(&ws, &f, &opts).unwrap();
        check_plan(&p, ws.len());
        let mut file = TesseraPlan::new();
        file.configs.insert("day".into(), export::config(&p, &ws));
        let back = TesseraPlan::parse(&file.to_yaml(), "plan").unwrap();
        prop_assert_eq!(&back, &file);
        let cfg = PartedFile::parse(&export::mig_parted(&file.configs), "parted").unwrap();
        assert_same_layouts(&file, &cfg);
        // Every placed workload is named once in the file: on its instance, or on its whole GPU.
        let mut named: Vec<&String> = file.configs["day"]
            .iter()
            .flat_map(|g| g.workloads.iter().chain(g.instances.iter().flat_map(|i| &i.workloads)))
            .collect();
        named.sort_unstable();
        let placed = ws.len() - p.unplaceable.len();
        prop_assert_eq!(named.len(), placed);
        named.dedup();
        prop_assert_eq!(named.len(), placed);
        for g in &file.configs["day"] {
            prop_assert!(g.mig_enabled || g.instances.is_empty());
            prop_assert!(!g.mig_enabled || g.workloads.is_empty());
        }
        // Every placed workload's instance holds its need (a kept GPU holds what runs on it today).
        for g in p.gpus.iter().filter(|g| !g.kept) {
            let m = mig::model(g.model).unwrap();
            for i in &g.instances {
                let prof = m.profile(i.profile_id).unwrap();
                for &w in &i.workloads {
                    prop_assert!(prof.memory_bytes >= ws[w].memory_bytes);
                    prop_assert!(prof.compute_slices >= ws[w].compute_slices);
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// The one definition of GPUs before, after and freed: `before − after = freed`; work keeps
    /// the GPU it has when the plan gives it no other place; a GPU in use now counts as freed only
    /// when nothing remains on it; only work without a known MIG-capable GPU is unplaceable.
    #[test]
    fn gpus_before_after_freed_agree_and_work_keeps_its_gpu((ws, f) in arb_case(), heuristic in any::<bool>()) {
        let opts = PlannerOptions { heuristic_only: heuristic, exact_node_limit: 20_000, ..PlannerOptions::default() };
        let p = plan(&ws, &f, &opts).unwrap();
        check_plan(&p, ws.len());
        let c = p.gpu_count(&ws);
        prop_assert_eq!(i64::from(c.before) - i64::from(c.after), c.freed);
        prop_assert_eq!(c.helps(), c.freed > 0);
        let uuid_of = |g: &FleetGpu| g.uuid.clone().unwrap();
        let current: BTreeSet<String> = ws.iter().filter_map(|w| w.current_gpu.clone()).collect();
        prop_assert_eq!(c.before as usize, current.len());
        // After: exactly the GPUs that hold some workload under the plan.
        let mut holding: BTreeSet<String> = p
            .gpus
            .iter()
            .filter(|g| g.instances.iter().any(|i| !i.workloads.is_empty()))
            .map(|g| uuid_of(&g.gpu))
            .collect();
        prop_assert_eq!(holding.len(), p.gpus.len(), "a planned GPU holds nothing");
        for u in &p.unplaceable {
            holding.extend(ws[u.workload].current_gpu.clone());
        }
        prop_assert_eq!(c.after as usize, holding.len());
        // A GPU in use now and not after holds no workload under the plan.
        for gone in current.difference(&holding) {
            prop_assert!(p.gpus.iter().all(|g| &uuid_of(&g.gpu) != gone));
        }
        // Kept work stays on the GPU it runs on, whole and MIG off, and nothing else moves there.
        for k in &p.kept {
            let g = p.gpus.iter().find(|g| g.gpu.node == k.node && g.gpu.index == k.index).unwrap();
            prop_assert!(g.kept && !g.mig_enabled);
            prop_assert_eq!(ws[k.workload].current_gpu.as_deref(), g.gpu.uuid.as_deref());
            for i in &g.instances {
                for &w in &i.workloads {
                    prop_assert_eq!(ws[w].current_gpu.as_deref(), g.gpu.uuid.as_deref());
                }
            }
        }
        // Only work without a known MIG-capable GPU is unplaceable.
        let mig_uuids: BTreeSet<String> = f.iter().filter(|g| g.mig_model().is_some()).map(uuid_of).collect();
        for u in &p.unplaceable {
            let cur = ws[u.workload].current_gpu.clone();
            prop_assert!(cur.is_none_or(|g| !mig_uuids.contains(&g)), "{:?}", u);
        }
    }
}

#[test]
fn work_too_big_for_any_instance_keeps_its_whole_gpu_and_counts_after() {
    // 71 GiB measured, 85 GiB with headroom: runs on an 80 GB GPU today, no MIG instance holds it.
    let mut big = wl("slurm-1", 85.2, 7);
    big.current_gpu = Some("GPU-n1-1".into());
    let mut small = wl("pod", 5.0, 1);
    small.current_gpu = Some("GPU-n1-0".into());
    let f = fleet("n1", "H100-80GB", 2);
    let ws = vec![big, small];
    let p = plan(&ws, &f, &PlannerOptions::default()).unwrap();
    assert!(p.unplaceable.is_empty(), "{:?}", p.unplaceable);
    assert_eq!(p.kept.len(), 1);
    assert_eq!((p.kept[0].node.as_str(), p.kept[0].index), ("n1", 1));
    assert!(
        p.kept[0].reason.contains("runs on that GPU today"),
        "{}",
        p.kept[0].reason
    );
    let c = p.gpu_count(&ws);
    assert_eq!((c.before, c.after, c.freed), (2, 2, 0));
    assert!(!c.helps());
    // The plan file names it on its own GPU, MIG off: replay finds it a place.
    let day = export::config(&p, &ws);
    let g1 = day.iter().find(|g| g.gpu == 1).unwrap();
    assert!(!g1.mig_enabled);
    assert_eq!(g1.workloads, vec!["slurm-1".to_string()]);
    // Without a known GPU it stays unplaceable, and is counted nowhere.
    let mut ws2 = ws.clone();
    ws2[0].current_gpu = None;
    let p2 = plan(&ws2, &f, &PlannerOptions::default()).unwrap();
    assert_eq!(p2.unplaceable.len(), 1);
    assert!(p2.kept.is_empty());
    assert_eq!(p2.gpu_count(&ws2), GpuCount::new(1, 1));
}

#[test]
fn gpu_count_text_says_more_needed_when_negative() {
    assert_eq!(GpuCount::new(8, 6).text(), "8 → 6 GPU(s), 2 freed");
    assert_eq!(
        GpuCount::new(61, 64).text(),
        "61 → 64 GPU(s), 3 more needed"
    );
    assert_eq!(GpuCount::new(61, 64).freed, -3);
    assert!(does_not_help_sentence(&GpuCount::new(61, 64)).contains("3 more GPU(s)"));
    assert!(does_not_help_sentence(&GpuCount::new(4, 4)).contains("as many GPUs as today"));
}

fn weekly_profile() -> crate::advisor::offpeak::Profile {
    use crate::advisor::offpeak::{Baseline, Profile, Window};
    Profile {
        period: "week",
        k: 1,
        gpus_observed: 2,
        slots: Vec::new(),
        baseline: Baseline::default(),
        windows: vec![
            Window {
                start_slot: 20,
                hours: 10,
                expected_free_gpus: 1,
                above_baseline: 1,
                confidence: 1.0,
                peak: None,
            },
            Window {
                start_slot: 44,
                hours: 10,
                expected_free_gpus: 2,
                above_baseline: 2,
                confidence: 1.0,
                peak: None,
            },
        ],
        hours_unobserved: 0,
    }
}

#[test]
fn schedule_switches_at_window_edges_on_their_days() {
    let tz: chrono_tz::Tz = "Europe/Berlin".parse().unwrap();
    let prof = weekly_profile();
    let s = schedule::schedule_file(&prof, tz, "plan.yaml");
    let back = tessera_core::mig::plan::MigSchedule::parse(&s.to_yaml(), "schedule").unwrap();
    assert_eq!(back, s);
    let night = s.switches.iter().find(|x| x.config == "night").unwrap();
    assert_eq!(
        (night.at.as_str(), night.days.clone()),
        ("20:00", vec!["mon".to_string(), "tue".into()])
    );
    let day = s.switches.iter().find(|x| x.config == "day").unwrap();
    assert_eq!(
        (day.at.as_str(), day.days.clone()),
        ("06:00", vec!["tue".to_string(), "wed".into()])
    );
    let cmd = schedule::ApplyCommand::new("/usr/bin/tessera", "/etc/tessera/schedule.yaml", &[]);
    let cron = schedule::cron_lines(&s, &cmd);
    assert!(cron.starts_with("CRON_TZ=Europe/Berlin\n"), "{cron}");
    assert!(
        cron.contains(
            "0 20 * * 1,2 root /usr/bin/tessera mig apply --schedule /etc/tessera/schedule.yaml --yes   # -> night\n"
        ),
        "{cron}"
    );
    assert!(cron.contains("0 6 * * 2,3 "), "{cron}");
    let cmd = schedule::ApplyCommand::new("/usr/bin/tessera", "/s.yaml", &[]);
    let (service, timer) = schedule::systemd_units(&s, &cmd);
    assert!(
        service.contains("\nExecStart=/usr/bin/tessera mig apply --schedule /s.yaml --yes\n"),
        "{service}"
    );
    assert!(
        timer.contains("OnCalendar=Mon,Tue *-*-* 20:00:00 Europe/Berlin"),
        "{timer}"
    );
    assert!(timer.contains("OnBootSec="), "{timer}");
    // Monday 21:00 Berlin (20:00 UTC in November) is in the window; Monday 12:00 is not.
    let h = |y, m, d, hh| {
        chrono::NaiveDate::from_ymd_opt(y, m, d)
            .unwrap()
            .and_hms_opt(hh, 0, 0)
            .unwrap()
            .and_utc()
            .timestamp()
            / 3600
    };
    assert!(schedule::in_window(&prof, tz, h(2026, 11, 2, 20)));
    assert!(!schedule::in_window(&prof, tz, h(2026, 11, 2, 11)));
    // Tuesday 05:00 Berlin (04:00 UTC) is the end of Monday's window.
    assert!(schedule::in_window(&prof, tz, h(2026, 11, 3, 4)));
    assert!(!schedule::in_window(&prof, tz, h(2026, 11, 3, 5)));
}

/// Issue 48 item 4: the scheduled apply carries `--yes` and its flags, quoted so that cron's
/// `/bin/sh` and systemd each read back the same words.
#[test]
fn the_scheduled_apply_is_quoted_for_cron_and_for_systemd() {
    let extra: Vec<String> = [
        "--backend",
        "sim",
        "--sim.state",
        "/srv/it's 100%/$HOME.json",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let cmd = schedule::ApplyCommand::new("/opt/tessera/bin/tessera", "/etc/t/s.yaml", &extra);
    assert_eq!(
        cmd.argv()[..6],
        [
            "/opt/tessera/bin/tessera",
            "mig",
            "apply",
            "--schedule",
            "/etc/t/s.yaml",
            "--yes"
        ]
    );
    assert_eq!(cmd.argv()[6..], extra[..]);
    assert_eq!(
        cmd.cron(),
        "/opt/tessera/bin/tessera mig apply --schedule /etc/t/s.yaml --yes --backend sim --sim.state '/srv/it'\\''s 100\\%/$HOME.json'"
    );
    assert_eq!(
        cmd.systemd(),
        "/opt/tessera/bin/tessera mig apply --schedule /etc/t/s.yaml --yes --backend sim --sim.state \"/srv/it's 100%%/$$HOME.json\""
    );
    // What /bin/sh makes of the cron command once cron has turned `\%` into `%`.
    let out = std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(format!("printf '%s\\n' {}", cmd.cron().replace("\\%", "%")))
        .output()
        .unwrap();
    let words: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(words, cmd.argv());
}

#[test]
fn no_switch_without_windows_or_without_freed_capacity() {
    let tz = chrono_tz::UTC;
    let mut prof = weekly_profile();
    let ws = vec![wl("api", 30.0, 3)];
    let f = fleet("n1", "H100-80GB", 1);
    let p = plan(&ws, &f, &PlannerOptions::default()).unwrap();
    let day = export::config(&p, &ws);
    // The API is loaded every hour: nothing to free.
    let hours: std::collections::BTreeSet<i64> = (0..24 * 14).map(|h| 493_000 + h).collect();
    let measured = vec![demand::Measured {
        kind: "mig",
        peak_memory_bytes: 25 * GIB,
        activity: Some(0.3),
        activity_source: "sm_active",
        slices_basis: 3,
        loaded_hours: hours.clone(),
        source: None,
    }];
    let why = schedule::propose(
        &day,
        &ws,
        &measured,
        &f,
        &hours,
        &prof,
        tz,
        0.9,
        "plan.yaml",
    )
    .unwrap_err()
    .to_string();
    assert!(why.contains("nothing to free"), "{why}");
    prof.windows.clear();
    let why = schedule::propose(
        &day,
        &ws,
        &measured,
        &f,
        &hours,
        &prof,
        tz,
        0.9,
        "plan.yaml",
    )
    .unwrap_err()
    .to_string();
    assert!(why.contains("no window"), "{why}");
    assert!(!why.contains("around the clock"), "{why}");
    // GPUs free around the clock are the baseline (over-provisioning), not a night window.
    prof.baseline.gpus = 2;
    let why = schedule::propose(
        &day,
        &ws,
        &measured,
        &f,
        &hours,
        &prof,
        tz,
        0.9,
        "plan.yaml",
    )
    .unwrap_err();
    assert_eq!(
        why,
        schedule::NoNightLayout::OnlyBaseline { k: 1, baseline: 2 }
    );
    let why = why.to_string();
    assert!(
        why.contains("no window with 1 GPU(s) free beyond the 2 free around the clock"),
        "{why}"
    );
}

#[test]
fn whole_gpus_by_day_are_never_switched_for_training() {
    let tz = chrono_tz::UTC;
    let prof = weekly_profile();
    let ws = vec![wl("train", 50.0, 1), wl("api", 30.0, 3)];
    let f = fleet("n1", "H100-80GB", 2);
    let p = plan(&ws, &f, &PlannerOptions::default()).unwrap();
    let day = export::config(&p, &ws);
    let whole = day.iter().find(|g| !g.workloads.is_empty()).unwrap();
    assert!(!whole.mig_enabled && whole.workloads == vec!["train"]);
    let hours: std::collections::BTreeSet<i64> = (0..24 * 14).map(|h| 493_000 + h).collect();
    let by_day: std::collections::BTreeSet<i64> = hours
        .iter()
        .copied()
        .filter(|&h| !schedule::in_window(&prof, tz, h))
        .collect();
    let measured = |loaded: &std::collections::BTreeSet<i64>| demand::Measured {
        kind: "mig",
        peak_memory_bytes: 25 * GIB,
        activity: Some(0.3),
        activity_source: "sm_active",
        slices_basis: 3,
        loaded_hours: loaded.clone(),
        source: None,
    };
    // The training job idles at night and the API runs: its GPU is freed, but it is whole with
    // MIG off by day already, so no switch (not MIG on for a 7g at night).
    let m = vec![measured(&by_day), measured(&hours)];
    let why = schedule::propose(&day, &ws, &m, &f, &hours, &prof, tz, 0.9, "plan.yaml")
        .unwrap_err()
        .to_string();
    assert!(why.contains("already are whole GPUs"), "{why}");
    // The API idles at night and the training job runs: the API's MIG GPU becomes the 7g training
    // GPU; the training job keeps its GPU whole, MIG off, in the night config too.
    let m = vec![measured(&hours), measured(&by_day)];
    let n = schedule::propose(&day, &ws, &m, &f, &hours, &prof, tz, 0.9, "plan.yaml").unwrap();
    let night_whole = n.night.iter().find(|g| g.gpu == whole.gpu).unwrap();
    assert!(!night_whole.mig_enabled && night_whole.workloads == vec!["train"]);
    assert_eq!(n.training_gpus.len(), 1);
    assert_ne!(n.training_gpus[0].1, whole.gpu);
    let mut file = TesseraPlan::new();
    file.configs.insert("day".into(), day.clone());
    file.configs.insert("night".into(), n.night.clone());
    file.validate("plan").unwrap();
}
