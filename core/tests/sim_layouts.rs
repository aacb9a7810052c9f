//! Layouts over time (issue 34, item 4): MIG layouts with `from`/`until` windows and workloads
//! that move, as the simulator samples them (the inventory, the MIG instances and the processes
//! change at the planted instant), and the strict checks of both (overlapping windows, `until`
//! not after `from`, unknown profiles, a `mig_start` that the layout does not have while the
//! workload is there, moves out of order).

use std::path::PathBuf;

use tessera_core::device::GpuBackend;
use tessera_core::sim::{Scenario, SimBackend, SimClock};

fn consolidation() -> Scenario {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/scenarios/consolidation.toml");
    Scenario::from_file(&path).unwrap()
}

fn ms(s: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(s)
        .unwrap()
        .timestamp_millis()
}

/// One sample of `node` taken at `at` (it describes the second before).
fn sample_at(s: &Scenario, node: &str, at: &str) -> (SimBackend, tessera_core::model::NodeSample) {
    let mut b = SimBackend::new(s, Some(node), SimClock::stepped(ms(at), 1000)).unwrap();
    let sample = b.sample().unwrap();
    (b, sample)
}

#[test]
fn the_layout_and_the_placements_change_at_the_planted_instant() {
    let s = consolidation();
    // The last second before the change: every GPU whole, one service each.
    let (mut b, before) = sample_at(&s, "gpu-a", "2026-11-04T13:00:00Z");
    let inv = b.inventory().unwrap();
    assert!(
        inv.gpus
            .iter()
            .all(|g| g.mig_mode.is_some_and(|m| !m.current))
    );
    assert!(
        before
            .gpus
            .iter()
            .all(|g| g.mig.is_empty() && g.processes.len() == 1)
    );
    assert!(before.gpus.iter().all(|g| g.busy_ratio.is_some()));
    // The first second after: GPUs 0 and 1 in MIG mode with five 1g instances and five
    // services each; GPUs 2-4 empty.
    let (mut b, after) = sample_at(&s, "gpu-a", "2026-11-04T13:00:01Z");
    let inv = b.inventory().unwrap();
    for g in 0..2 {
        assert!(inv.gpus[g].mig_mode.is_some_and(|m| m.current), "GPU {g}");
        assert_eq!(inv.gpus[g].mig_instances.len(), 5);
        assert!(
            inv.gpus[g]
                .mig_instances
                .iter()
                .all(|m| m.profile_name == "1g.10gb")
        );
        assert_eq!(after.gpus[g].mig.len(), 5);
        assert_eq!(after.gpus[g].processes.len(), 5);
        assert!(
            after.gpus[g]
                .processes
                .iter()
                .all(|p| p.gpu_instance_id.is_some())
        );
        assert_eq!(
            after.gpus[g].busy_ratio, None,
            "no device utilisation in MIG mode"
        );
    }
    for g in 2..5 {
        assert!(after.gpus[g].processes.is_empty(), "GPU {g} empty");
        assert_eq!(after.gpus[g].memory_used_bytes, Some(512 << 20));
    }
    // gpu-b's services moved to gpu-a: gpu-b runs nothing after the change.
    let (_, b_after) = sample_at(&s, "gpu-b", "2026-11-04T13:00:01Z");
    assert!(b_after.gpus.iter().all(|g| g.processes.is_empty()));
    // A process keeps its pid when it moves (the simulator's identity of a workload).
    let pid_before = before.gpus[1].processes[0].pid;
    assert!(after.gpus[0].processes.iter().any(|p| p.pid == pid_before));
}

#[test]
fn one_backend_follows_the_schedule_as_its_clock_runs() {
    let s = consolidation();
    let mut b = SimBackend::new(
        &s,
        Some("gpu-a"),
        SimClock::stepped(ms("2026-11-04T12:59:58Z"), 1000),
    )
    .unwrap();
    let epoch = b.node().layout_epoch();
    let mut mig = Vec::new();
    for _ in 0..4 {
        let sample = b.sample().unwrap();
        mig.push(sample.gpus[0].mig.len());
    }
    // Readings at 12:59:58 … 13:00:01 describe the second before each: the first one of the
    // new layout is the reading at 13:00:01 (the second 13:00:00).
    assert_eq!(mig, [0, 0, 0, 5], "the layout changes with the clock");
    assert_eq!(
        b.node().layout_epoch(),
        epoch + 1,
        "one change: the epoch moves once"
    );
}

fn refused(text: &str, want: &[&str]) {
    let err = match Scenario::from_toml(text, "case.toml") {
        Ok(_) => panic!("accepted, expected {want:?}"),
        Err(e) => e.to_string(),
    };
    for w in want {
        assert!(err.contains(w), "expected {w:?} in: {err}");
    }
}

const HEAD: &str = r#"name = "x"
start = "2026-11-02T00:00:00Z"
[[nodes]]
name = "n"
gpus = [{ model = "H100-80GB", count = 2 }]
"#;

fn layout(gpu: u32, window: &str, profile: &str, start: u32) -> String {
    format!(
        "[[nodes.mig]]\ngpu = {gpu}\n{window}\ninstances = [{{ profile = \"{profile}\", start = {start} }}]\n"
    )
}

fn workload(rest: &str) -> String {
    format!(
        "[[workloads]]\nname = \"w\"\nkind = \"inference\"\nnode = \"n\"\ngpu = 0\nmemory_gib = 4.0\n{rest}\n"
    )
}

#[test]
fn bad_layouts_over_time_are_refused_naming_the_item() {
    let day = |d: u32| format!("2026-11-{d:02}T00:00:00Z");
    let w = |a: u32, b: u32| format!("from = \"{}\"\nuntil = \"{}\"", day(a), day(b));
    // Windows of one GPU that overlap.
    refused(
        &format!(
            "{HEAD}{}{}",
            layout(0, &w(2, 5), "1g.10gb", 0),
            layout(0, &w(4, 6), "3g.40gb", 0)
        ),
        &[
            "nodes[0] (n).mig[1]",
            "two MIG layouts in force at once",
            "mig[0]",
        ],
    );
    // A window and a layout for all time on the same GPU overlap too.
    refused(
        &format!(
            "{HEAD}{}{}",
            layout(0, "", "1g.10gb", 0),
            layout(0, &w(4, 6), "1g.10gb", 0)
        ),
        &["two MIG layouts in force at once"],
    );
    // until not after from.
    refused(
        &format!("{HEAD}{}", layout(0, &w(5, 5), "1g.10gb", 0)),
        &["nodes[0] (n).mig[0]", "must be after from"],
    );
    // An unknown profile in a window.
    refused(
        &format!("{HEAD}{}", layout(0, &w(3, 5), "9g.99gb", 0)),
        &["unknown MIG profile \"9g.99gb\""],
    );
    // A whole-GPU workload on a GPU whose MIG window opens while it is there.
    refused(
        &format!(
            "{HEAD}{}{}",
            layout(0, &format!("from = \"{}\"", day(4)), "1g.10gb", 0),
            workload("")
        ),
        &[
            "workloads[0] (w)",
            "MIG enabled from 2026-11-04",
            "mig_start",
        ],
    );
    // A workload in an instance the GPU does not have for its whole stay.
    refused(
        &format!(
            "{HEAD}{}{}",
            layout(0, &format!("from = \"{}\"", day(4)), "1g.10gb", 0),
            workload("mig_start = 0")
        ),
        &[
            "workloads[0] (w)",
            "mig_start given but GPU 0 has MIG off at the start",
        ],
    );
    // Moving into the instance when it appears is fine …
    let ok = format!(
        "{HEAD}{}{}",
        layout(0, &format!("from = \"{}\"", day(4)), "1g.10gb", 0),
        workload(&format!(
            "gpu = 1\nmoves = [{{ at = \"{}\", gpu = 0, mig_start = 0 }}]",
            day(4)
        ))
        .replacen("gpu = 0\n", "", 1)
    );
    Scenario::from_toml(&ok, "case.toml").unwrap_or_else(|e| panic!("{e}"));
    // … moves out of order, to a GPU or node that does not exist, or after until are not.
    for (moves, want) in [
        (
            format!(
                "moves = [{{ at = \"{}\", gpu = 1 }}, {{ at = \"{}\", gpu = 0 }}]",
                day(5),
                day(4)
            ),
            "moves[1]",
        ),
        (
            format!("moves = [{{ at = \"{}\", gpu = 7 }}]", day(4)),
            "GPU 7 does not exist",
        ),
        (
            format!("moves = [{{ at = \"{}\", node = \"m\", gpu = 0 }}]", day(4)),
            "unknown node \"m\"",
        ),
        (
            format!(
                "until = \"{}\"\nmoves = [{{ at = \"{}\", gpu = 1 }}]",
                day(3),
                day(4)
            ),
            "before the workload's until",
        ),
    ] {
        refused(
            &format!("{HEAD}{}", workload(&moves)),
            &["workloads[0] (w).moves", want],
        );
    }
}
