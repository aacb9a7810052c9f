//! Simulator properties: scenarios load, samples are deterministic, MIG state obeys the
//! placement table, faults and NotSupported fields show up as documented.

use std::path::PathBuf;

use tessera_core::device::GpuBackend;
use tessera_core::mig::{self, LayoutInstance};
use tessera_core::model::GpuStatus;
use tessera_core::sim::truth::GroundTruth;
use tessera_core::sim::{Scenario, SimBackend, SimClock};

fn demo() -> Scenario {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/scenarios/demo.toml");
    Scenario::from_file(&path).unwrap()
}

fn ms(s: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(s)
        .unwrap()
        .timestamp_millis()
}

fn stepped(s: &Scenario, node: &str, start: &str) -> SimBackend {
    SimBackend::new(
        s,
        Some(node),
        SimClock::Stepped {
            next_ms: ms(start),
            step_ms: 1000,
        },
    )
    .unwrap()
}

#[test]
fn same_seed_gives_identical_samples() {
    let s = demo();
    for node in ["gpu-node-1", "gpu-node-2", "gpu-node-3"] {
        let mut a = stepped(&s, node, "2026-11-02T13:00:00Z");
        let mut b = stepped(&s, node, "2026-11-02T13:00:00Z");
        for _ in 0..30 {
            assert_eq!(a.sample().unwrap(), b.sample().unwrap());
        }
        assert_eq!(a.inventory().unwrap(), b.inventory().unwrap());
    }
}

#[test]
fn another_seed_gives_other_samples() {
    let s = demo();
    let mut other = s.clone();
    other.seed += 1;
    let mut a = stepped(&s, "gpu-node-1", "2026-11-02T13:00:00Z");
    let mut b = stepped(&other, "gpu-node-1", "2026-11-02T13:00:00Z");
    assert_ne!(
        a.sample().unwrap().gpus[0].sm_active_ratio,
        b.sample().unwrap().gpus[0].sm_active_ratio
    );
    assert_ne!(
        a.inventory().unwrap().gpus[0].uuid,
        b.inventory().unwrap().gpus[0].uuid
    );
}

#[test]
fn mig_state_obeys_the_placement_table() {
    let s = demo();
    for node in &s.nodes {
        let mut b = stepped(&s, &node.name, "2026-11-02T13:00:00Z");
        let inv = b.inventory().unwrap();
        for gpu in &inv.gpus {
            let model = mig::model_by_nvml_name(&gpu.name).unwrap();
            let layout: Vec<LayoutInstance> = gpu
                .mig_instances
                .iter()
                .map(|m| LayoutInstance {
                    profile_id: m.profile_id,
                    placement: m.placement,
                })
                .collect();
            if gpu.mig_mode.is_some_and(|m| m.current) {
                assert!(!layout.is_empty());
                mig::validate_layout(model, &layout).unwrap();
                for m in &gpu.mig_instances {
                    let p = model.profile(m.profile_id).unwrap();
                    assert_eq!(m.profile_name, p.name);
                    assert_eq!(m.memory_total_bytes, Some(p.memory_bytes));
                }
                let mut gi: Vec<_> = gpu
                    .mig_instances
                    .iter()
                    .map(|m| m.gpu_instance_id)
                    .collect();
                gi.dedup();
                assert_eq!(
                    gi.len(),
                    gpu.mig_instances.len(),
                    "GPU instance ids are unique"
                );
            } else {
                assert!(layout.is_empty());
            }
        }
    }
}

#[test]
fn mig_mode_hides_device_utilisation_like_real_hardware() {
    let s = demo();
    let mut b = stepped(&s, "gpu-node-1", "2026-11-02T14:00:00Z");
    let sample = b.sample().unwrap();
    let mig_gpu = &sample.gpus[3];
    assert_eq!(
        mig_gpu.busy_ratio, None,
        "NVML has no utilisation in MIG mode"
    );
    assert!(mig_gpu.sm_active_ratio.is_some(), "H100 has GPM");
    assert_eq!(mig_gpu.mig.len(), 3);
    let rerank = mig_gpu
        .processes
        .iter()
        .find(|p| p.gpu_instance_id == Some(mig_gpu.mig[0].gpu_instance_id));
    assert!(rerank.is_some_and(|p| p.sm_ratio.is_none()));
    // A100 has no GPM: SM activity absent, never 0.
    let mut a100 = stepped(&s, "gpu-node-2", "2026-11-02T14:00:00Z");
    let a = a100.sample().unwrap();
    assert_eq!(a.gpus[0].sm_active_ratio, None);
    assert!(a.gpus[0].busy_ratio.is_some());
    // Scenario-level NotSupported: PCIe on node 2 GPU 2.
    assert_eq!(a.gpus[2].pcie_rx_bytes_per_second, None);
    assert!(a.gpus[2].errors.is_empty());
}

#[test]
fn faults_appear_at_their_time() {
    let s = demo();
    let mut n1 = stepped(&s, "gpu-node-1", "2026-11-02T02:59:59Z");
    let before = n1.sample().unwrap();
    assert!(before.gpus[2].xid_events.is_empty());
    assert_eq!(before.gpus[2].ecc_corrected_total, Some(0));
    let at = n1.sample().unwrap();
    assert_eq!(at.gpus[2].xid_events.len(), 1);
    assert_eq!(at.gpus[2].xid_events[0].xid, 79);
    assert_eq!(at.gpus[2].ecc_corrected_total, Some(3));
    let after = n1.sample().unwrap();
    assert!(
        after.gpus[2].xid_events.is_empty(),
        "an XID is reported once"
    );

    let mut n3 = stepped(&s, "gpu-node-3", "2026-11-03T11:00:00Z");
    let lost = n3.sample().unwrap();
    assert_eq!(lost.gpus[1].status, GpuStatus::Lost);
    assert_eq!(lost.gpus[1].power_watts, None);
    assert_eq!(
        lost.gpus[0].status,
        GpuStatus::Ok,
        "one GPU's fault never drops the others"
    );
    assert!(lost.gpus[0].power_watts.is_some());

    let mut n2 = stepped(&s, "gpu-node-2", "2026-11-02T06:05:00Z");
    let err = n2.sample().unwrap();
    assert_eq!(err.gpus[0].status, GpuStatus::Degraded);
    assert_eq!(err.gpus[0].power_watts, None);
    assert_eq!(err.gpus[0].errors[0].field, "power");
    assert_eq!(err.gpus[0].errors[0].kind, "unknown");
}

#[test]
fn energy_counts_up_with_power() {
    let s = demo();
    let mut b = stepped(&s, "gpu-node-1", "2026-11-02T14:00:00Z");
    let a = b.sample().unwrap();
    let c = b.sample().unwrap();
    let (e0, e1) = (
        a.gpus[0].energy_joules.unwrap(),
        c.gpus[0].energy_joules.unwrap(),
    );
    let p = c.gpus[0].power_watts.unwrap();
    assert!(
        (e1 - e0 - p).abs() < 1e-6,
        "1 s at {p} W adds {p} J, got {}",
        e1 - e0
    );
}

#[test]
fn ground_truth_finds_the_planted_conditions() {
    let s = demo();
    let start = s.start;
    let truth = GroundTruth::compute(&s, start, start + chrono::Duration::days(7));
    let idle: Vec<_> = truth
        .idle_loaded
        .iter()
        .map(|t| t.workload.as_str())
        .collect();
    assert!(idle.contains(&"embeddings-forgotten"));
    assert!(idle.contains(&"ocr-mig-idle"));
    assert!(
        !idle.contains(&"tiny-idle"),
        "0.8 GiB is below the 1 GiB bar"
    );
    assert!(!idle.contains(&"chat-api"));
    let forgotten = truth
        .idle_loaded
        .iter()
        .find(|t| t.workload == "embeddings-forgotten")
        .unwrap();
    assert_eq!((forgotten.start, forgotten.end), (truth.start, truth.end));
    let bnw: Vec<_> = truth
        .busy_not_working
        .iter()
        .map(|t| t.workload.as_str())
        .collect();
    assert!(bnw.contains(&"dataloader-bound") && !bnw.contains(&"chat-api"));
    let train = truth
        .workloads
        .iter()
        .find(|w| w.name == "llm-pretrain")
        .unwrap();
    assert_eq!(train.loaded.len(), 5, "five weekday nights");
    assert_eq!(
        truth,
        GroundTruth::compute(&s, start, start + chrono::Duration::days(7))
    );
}

#[test]
fn bad_scenarios_fail_with_a_clear_message() {
    let base = r#"name = "x"
start = "2026-11-02T00:00:00Z"
[[nodes]]
name = "n"
gpus = [{ model = "H100-80GB", count = 1 }]
"#;
    let cases = [
        (format!("{base}bogus = 1\n"), "unknown field"),
        (
            base.replace("H100-80GB", "H900"),
            "unknown GPU model \"H900\"",
        ),
        (
            format!(
                "{base}mig = [{{ gpu = 0, instances = [{{ profile = \"3g.40gb\", start = 2 }}] }}]\n"
            ),
            "cannot be placed at",
        ),
        (
            format!(
                "{base}mig = [{{ gpu = 0, instances = [{{ profile = \"3g.40gb\", start = 0 }}, {{ profile = \"1g.10gb\", start = 2 }}] }}]\n"
            ),
            "overlap",
        ),
        (
            format!(
                "{base}[[workloads]]\nname = \"w\"\nkind = \"idle\"\nnode = \"m\"\ngpu = 0\nmemory_gib = 1.0\n"
            ),
            "unknown node \"m\"",
        ),
        (
            format!(
                "{base}[[workloads]]\nname = \"w\"\nkind = \"idle\"\nnode = \"n\"\ngpu = 0\nmemory_gib = 500.0\n"
            ),
            "memory_gib = 500",
        ),
        (
            format!(
                "{base}[[faults]]\nkind = \"nvml_error\"\nnode = \"n\"\ngpu = 0\nfield = \"volts\"\n"
            ),
            "field \"volts\"",
        ),
        (
            "name = \"x\"\nstart = \"yesterday\"\nnodes = []\n".to_string(),
            "start",
        ),
    ];
    for (text, want) in cases {
        let err = Scenario::from_toml(&text, "case.toml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("case.toml"), "{err}");
        assert!(err.contains(want), "expected {want:?} in: {err}");
    }
}

// ---- Hostile scenarios (issue 17, items 3 and 7): limits checked before allocating, and
// nonsense values refused with the item that holds them.
mod hostile {

    use tessera_core::sim::Scenario;
    use tessera_core::sim::scenario::limits;

    const HEAD: &str = "name = \"x\"\nstart = \"2026-11-02T00:00:00Z\"\n";

    fn node(name: &str, gpus: &str) -> String {
        format!("[[nodes]]\nname = \"{name}\"\ngpus = [{gpus}]\n")
    }

    fn h100(count: u64) -> String {
        format!("{{ model = \"H100-80GB\", count = {count} }}")
    }

    /// A one-node scenario (one H100) plus `rest`.
    fn one(rest: &str) -> String {
        format!("{HEAD}{}{rest}", node("n", &h100(1)))
    }

    /// Parse `text`, which must fail naming the file and every `want`.
    #[track_caller]
    fn refused(text: &str, want: &[&str]) -> String {
        let err = match Scenario::from_toml(text, "case.toml") {
            Ok(_) => panic!("accepted, expected an error with {want:?}"),
            Err(e) => e.to_string(),
        };
        assert!(err.starts_with("scenario case.toml: "), "{err}");
        for w in want {
            assert!(err.contains(w), "expected {w:?} in: {err}");
        }
        err
    }

    #[track_caller]
    fn accepted(text: &str) -> Scenario {
        Scenario::from_toml(text, "case.toml").unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_billion_gpus_is_refused_before_allocating() {
        // The three-line scenario of the issue: allocated until the kernel killed it. Refused by
        // the count check (the message names it), so nothing proportional was allocated.
        let text = format!("{HEAD}{}", node("n", &h100(1_000_000_000)));
        refused(&text, &["nodes[0] (n)", "1000000000 GPUs", "at most 64"]);
        // u32::MAX twice: the sum is done in 64 bits.
        let big = format!("{}, {}", h100(u32::MAX as u64), h100(u32::MAX as u64));
        refused(&format!("{HEAD}{}", node("n", &big)), &["8589934590 GPUs"]);
    }

    #[test]
    fn gpus_per_node_at_and_over_the_limit() {
        let n = limits::GPUS_PER_NODE;
        let s = accepted(&format!(
            "{HEAD}{}",
            node("n", &format!("{}, {}", h100(n / 2), h100(n / 2)))
        ));
        assert_eq!(s.node_models(&s.nodes[0]).len() as u64, n);
        refused(
            &format!(
                "{HEAD}{}",
                node("n", &format!("{}, {}", h100(n / 2), h100(n / 2 + 1)))
            ),
            &[
                "nodes[0] (n).gpus",
                &format!("{} GPUs", n + 1),
                "at most 64",
            ],
        );
        refused(
            &format!("{HEAD}{}", node("n", &h100(0))),
            &["nodes[0] (n).gpus[0]", "count = 0"],
        );
    }

    #[test]
    fn nodes_at_and_over_the_limit() {
        let nodes =
            |k: usize| -> String { (0..k).map(|i| node(&format!("n{i}"), &h100(1))).collect() };
        let s = accepted(&format!("{HEAD}{}", nodes(limits::NODES)));
        assert_eq!(s.nodes.len(), limits::NODES);
        refused(
            &format!("{HEAD}{}", nodes(limits::NODES + 1)),
            &["nodes", "4097 nodes", "at most 4096"],
        );
    }

    fn workloads(k: usize) -> String {
        (0..k)
            .map(|i| {
                format!("[[workloads]]\nname = \"w{i}\"\nkind = \"idle\"\nnode = \"n\"\ngpu = 0\nmemory_gib = 0.1\n")
            })
            .collect()
    }

    #[test]
    fn workloads_at_and_over_the_limit() {
        let s = accepted(&one(&workloads(limits::WORKLOADS)));
        assert_eq!(s.workloads.len(), limits::WORKLOADS);
        refused(
            &one(&workloads(limits::WORKLOADS + 1)),
            &["workloads", "65537 workloads", "at most 65536"],
        );
    }

    #[test]
    fn faults_at_and_over_the_limit() {
        let faults = |k: usize| -> String {
            "[[faults]]\nkind = \"xid\"\nnode = \"n\"\ngpu = 0\nat = \"2026-11-02T01:00:00Z\"\nxid = 79\n"
                .repeat(k)
        };
        let s = accepted(&one(&faults(limits::FAULTS)));
        assert_eq!(s.faults.len(), limits::FAULTS);
        refused(
            &one(&faults(limits::FAULTS + 1)),
            &["faults", "10001 faults", "at most 10000"],
        );
    }

    #[test]
    fn mig_instances_at_and_over_the_limit() {
        let layout = |k: u32| -> String {
            let inst: Vec<String> = (0..k)
                .map(|s| format!("{{ profile = \"1g.10gb\", start = {s} }}"))
                .collect();
            one(&format!(
                "[[nodes.mig]]\ngpu = 0\ninstances = [{}]\n",
                inst.join(", ")
            ))
        };
        let s = accepted(&layout(7));
        assert_eq!(
            s.nodes[0].mig[0].instances.len(),
            limits::MIG_INSTANCES_PER_GPU
        );
        refused(
            &layout(8),
            &["nodes[0] (n).mig[0]", "8 MIG instances", "at most 7"],
        );
        // Many of them are refused before any is looked at.
        let many = format!(
            "{}[[nodes.mig]]\ngpu = 0\ninstances = [{}]\n",
            one(""),
            vec!["{ profile = \"1g.10gb\", start = 0 }"; 20_000].join(",")
        );
        refused(&many, &["20000 MIG instances"]);
        // Layouts of GPUs that do not exist, a thousand times over.
        let layouts = "[[nodes.mig]]\ngpu = 5\ninstances = []\n".repeat(1000);
        refused(
            &one(&layouts),
            &["nodes[0] (n)", "1000 MIG layouts", "1 GPU"],
        );
    }

    #[test]
    fn fault_counts_at_and_over_the_limit() {
        let ecc = |count: u64| {
            one(&format!(
                "[[faults]]\nkind = \"ecc\"\nnode = \"n\"\ngpu = 0\nat = \"2026-11-02T01:00:00Z\"\ncount = {count}\n"
            ))
        };
        accepted(&ecc(limits::FAULT_COUNT));
        refused(
            &ecc(limits::FAULT_COUNT + 1),
            &["faults[0] (Ecc)", "count = 100001", "1–100000"],
        );
        refused(&ecc(0), &["faults[0] (Ecc)", "count = 0"]);
        refused(&ecc(u64::MAX >> 1), &["faults[0] (Ecc)"]);
    }

    #[test]
    fn file_size_at_and_over_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let base = one("");
        let pad = |total: u64| -> String {
            let mut t = base.clone();
            t.push('#');
            t.push_str(&" ".repeat(total as usize - t.len() - 1));
            t.push('\n');
            assert_eq!(t.len() as u64, total);
            t
        };
        let at = dir.path().join("at.toml");
        std::fs::write(&at, pad(limits::FILE_BYTES)).unwrap();
        Scenario::from_file(&at).unwrap();
        let over = dir.path().join("over.toml");
        std::fs::write(&over, pad(limits::FILE_BYTES + 1)).unwrap();
        let err = Scenario::from_file(&over).unwrap_err().to_string();
        assert!(
            err.contains("over.toml") && err.contains("file") && err.contains("16777216 bytes"),
            "{err}"
        );
        refused(&pad(limits::FILE_BYTES + 1), &["file", "16777216 bytes"]);
        // A file without a size: read no further than the limit.
        let err = Scenario::from_file(std::path::Path::new("/dev/zero"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("/dev/zero") && err.contains("16777216 bytes"),
            "{err}"
        );
    }

    #[test]
    fn parse_errors_of_long_lines_stay_short() {
        // toml echoes the whole line (twice) in its message; a 1 MB line must not come back.
        let text = format!("{}bogus = [{}]\n", one(""), "1, ".repeat(300_000));
        let err = refused(&text, &["line 6", "column 1", "unknown field `bogus`"]);
        assert!(err.len() < 2_000, "{} bytes", err.len());
    }

    #[test]
    fn nonsense_values_are_refused_naming_the_item() {
        let training = |extra: &str| {
            one(&format!(
                "[[workloads]]\nname = \"t\"\nkind = \"training\"\nnode = \"n\"\ngpu = 0\nmemory_gib = 1.0\n{extra}"
            ))
        };
        let batch = |extra: &str| {
            one(&format!(
                "[[workloads]]\nname = \"b\"\nkind = \"batch\"\nnode = \"n\"\ngpu = 0\nmemory_gib = 1.0\n{extra}"
            ))
        };
        let lost = |window: &str| {
            one(&format!(
                "[[faults]]\nkind = \"gpu_lost\"\nnode = \"n\"\ngpu = 0\n{window}"
            ))
        };
        let w = "workloads[0] (t)";
        let cases: Vec<(String, Vec<&str>)> = vec![
            (
                training("start_hour = 22.0\nduration_hours = -3.0\n"),
                vec![w, "duration_hours = -3"],
            ),
            (
                training("start_hour = 22.0\nduration_hours = 0.0\n"),
                vec![w, "duration_hours = 0"],
            ),
            (
                training("start_hour = 22.0\nduration_hours = nan\n"),
                vec![w, "duration_hours = NaN"],
            ),
            (
                training("start_hour = 22.0\nduration_hours = inf\n"),
                vec![w, "duration_hours = inf"],
            ),
            (
                training("start_hour = 22.0\nduration_hours = 1e300\n"),
                vec![w, "at most 168"],
            ),
            (
                training("start_hour = nan\nduration_hours = 2.0\n"),
                vec![w, "start_hour = NaN"],
            ),
            (training("peak = nan\n"), vec![w, "peak = NaN"]),
            (training("noise = -inf\n"), vec![w, "noise = -inf"]),
            (training("efficiency = nan\n"), vec![w, "efficiency = NaN"]),
            (
                training("memory_gib = nan\n").replace("memory_gib = 1.0\n", ""),
                vec![w, "memory_gib = NaN"],
            ),
            (
                training("memory_gib = -1.0\n").replace("memory_gib = 1.0\n", ""),
                vec![w, "memory_gib = -1"],
            ),
            (
                training("days = [\"mon\", \"mon\"]\nstart_hour = 1.0\nduration_hours = 1.0\n"),
                vec![w, "\"mon\" twice"],
            ),
            (
                training("from = \"2026-11-03T00:00:00Z\"\nuntil = \"2026-11-02T00:00:00Z\"\n"),
                vec![w, "until", "after from"],
            ),
            (
                training("from = \"2026-11-03T00:00:00Z\"\nuntil = \"2026-11-03T00:00:00Z\"\n"),
                vec![w, "until", "after from"],
            ),
            (
                batch("every_hours = inf\nduration_minutes = 30.0\n"),
                vec!["workloads[0] (b)", "every_hours = inf"],
            ),
            (
                batch("every_hours = nan\nduration_minutes = 30.0\n"),
                vec!["workloads[0] (b)", "every_hours = NaN"],
            ),
            (
                batch("every_hours = 6.0\nduration_minutes = nan\n"),
                vec!["workloads[0] (b)", "duration_minutes = NaN"],
            ),
            (
                batch("every_hours = 1.0\nduration_minutes = 61.0\n"),
                vec!["workloads[0] (b)", "duration_minutes = 61", "every_hours"],
            ),
            (
                lost("at = \"2026-11-02T10:00:00Z\"\nuntil = \"2026-11-02T09:00:00Z\"\n"),
                vec!["faults[0] (GpuLost)", "until", "after at"],
            ),
            (
                lost("at = \"2026-11-02T10:00:00Z\"\nuntil = \"2026-11-02T10:00:00Z\"\n"),
                vec!["faults[0] (GpuLost)", "until", "after at"],
            ),
            (
                one(
                    "[[faults]]\nkind = \"driver_error\"\nnode = \"n\"\nat = \"2026-11-02T10:00:00Z\"\nuntil = \"2026-11-01T10:00:00Z\"\n",
                ),
                vec!["faults[0] (DriverError)", "until"],
            ),
            (
                one(
                    "[[faults]]\nkind = \"row_remap\"\nnode = \"n\"\ngpu = 0\nat = \"2026-11-02T10:00:00Z\"\ncount = 0\n",
                ),
                vec!["faults[0] (RowRemap)", "count = 0"],
            ),
            (
                format!("{HEAD}utc_offset_hours = 1000\n{}", node("n", &h100(1))),
                vec!["utc_offset_hours", "1000", "-12", "14"],
            ),
            (
                format!("{HEAD}{}", node("", &h100(1))),
                vec!["nodes[0]", "name"],
            ),
            (
                one(
                    "[[workloads]]\nname = \"\"\nkind = \"idle\"\nnode = \"n\"\ngpu = 0\nmemory_gib = 1.0\n",
                ),
                vec!["workloads[0]", "name"],
            ),
            // Rejected by the types already (u32, u64): the TOML error names line and column.
            (
                format!(
                    "{HEAD}{}",
                    node("n", "{ model = \"H100-80GB\", count = -1 }")
                ),
                vec!["line 5", "-1"],
            ),
            (
                one(
                    "[[workloads]]\nname = \"w\"\nkind = \"idle\"\nnode = \"n\"\ngpu = -1\nmemory_gib = 1.0\n",
                ),
                vec!["line 10", "column 7", "-1"],
            ),
        ];
        for (text, want) in cases {
            refused(&text, &want);
        }
        // In range: still accepted.
        accepted(&training(
            "start_hour = 22.0\nduration_hours = 168.0\ndays = [\"mon\", \"tue\"]\n",
        ));
        accepted(&batch("every_hours = 1.0\nduration_minutes = 60.0\n"));
        accepted(&lost(
            "at = \"2026-11-02T10:00:00Z\"\nuntil = \"2026-11-02T10:00:01Z\"\n",
        ));
        accepted(&format!(
            "{HEAD}utc_offset_hours = -12\n{}",
            node("n", &h100(1))
        ));
        accepted(&format!(
            "{HEAD}utc_offset_hours = 14\n{}",
            node("n", &h100(1))
        ));
    }

    #[test]
    fn every_shipped_scenario_is_within_the_limits() {
        let dir =
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/scenarios");
        let mut n = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let p = entry.unwrap().path();
            if p.extension().is_some_and(|e| e == "toml") {
                Scenario::from_file(&p).unwrap_or_else(|e| panic!("{e}"));
                n += 1;
            }
        }
        assert!(n >= 10);
    }
}
