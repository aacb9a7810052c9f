//! The comparison's sums against a plain reference on random partitions: every row of every
//! partition, in order, added to every period it ends in, through ordered maps and sets and a map
//! of (GPU, `ts`) for the process rows' shares — as the comparison was computed before it kept
//! sums per slot (an hour; here a row, so that any window of whole rows is whole slots). GPU rows come shuffled or in order, with duplicates (the last
//! one's figures count for the processes) and gaps; some process rows have no GPU row; a node
//! is missing on some rows; windows overlap.

use std::collections::{BTreeMap, BTreeSet};

use polars::prelude::*;
use proptest::prelude::*;

use super::Window;
use super::*;
use crate::changes::keys::{Interner, gpu_ids, workload_ids};
use crate::changes::testing::Seeded;
use crate::frames::Frames;

const IV: i64 = 10_000;

/// A value in [0, 1], or none one time in `none_in`.
fn value(r: &mut Seeded, none_in: u64) -> Option<f64> {
    (r.below(none_in) != 0).then(|| r.below(1000) as f64 / 997.0)
}

/// One GPU row: node, index, uuid, ts, interval, busy, sm, memory, power, energy.
type GpuRow = (
    Option<String>,
    i64,
    String,
    i64,
    Option<i64>,
    Option<f64>,
    Option<f64>,
    Option<f64>,
    Option<f64>,
    Option<f64>,
);
/// One process row: node, index, uuid, ts, pid, process, namespace, pod, job.
type ProcRow = (
    Option<String>,
    i64,
    String,
    i64,
    i64,
    String,
    Option<String>,
    Option<String>,
    Option<String>,
);

fn partition(r: &mut Seeded, node: &str, n: i64) -> (Vec<GpuRow>, Vec<ProcRow>) {
    let (mut gpu, mut process) = (Vec::new(), Vec::new());
    for k in 0..n {
        let ts = k * IV;
        for g in 0..3i64 {
            if r.below(20) == 0 {
                continue;
            }
            let node = (r.below(25) != 0).then(|| node.to_string());
            let mem = value(r, 5).map(|m| m * 4.0 * GIB);
            let row = (
                node.clone(),
                g,
                format!("{node:?}-GPU-{g}"),
                ts,
                (r.below(30) != 0).then_some(IV),
                value(r, 4),
                value(r, 3),
                mem,
                value(r, 4).map(|p| p * 300.0),
                value(r, 3).map(|e| e * 3000.0),
            );
            if r.below(30) == 0 {
                // A duplicate with other figures: the last one counts for the processes.
                let mut dup = row.clone();
                dup.6 = value(r, 2);
                gpu.push(row);
                gpu.push(dup);
            } else {
                gpu.push(row);
            }
            for p in 0..r.below(3) as i64 {
                let (ns, pod, job) = match (g + p) % 3 {
                    0 => (Some("team-a".to_string()), Some(format!("pod-{p}")), None),
                    1 => (None, None, Some(format!("{}", 40 + p))),
                    _ => (None, None, None),
                };
                process.push((
                    Some(node.clone().unwrap_or_default()).filter(|n| !n.is_empty()),
                    // Now and then a process on a GPU without a row.
                    if r.below(40) == 0 { 7 } else { g },
                    format!("{node:?}-GPU-{g}"),
                    ts,
                    100 + p,
                    format!("proc{p}"),
                    ns,
                    pod,
                    job,
                ));
            }
        }
    }
    let shuffle = r.below(2) == 0;
    if shuffle {
        for i in (1..gpu.len()).rev() {
            gpu.swap(i, r.below(i as u64 + 1) as usize);
        }
        for i in (1..process.len()).rev() {
            process.swap(i, r.below(i as u64 + 1) as usize);
        }
    }
    (gpu, process)
}

fn frames(gpu: &[GpuRow], process: &[ProcRow]) -> Frames {
    let g = df!(
        "node" => gpu.iter().map(|r| r.0.clone()).collect::<Vec<_>>(),
        "gpu" => gpu.iter().map(|r| r.1).collect::<Vec<_>>(),
        "uuid" => gpu.iter().map(|r| r.2.clone()).collect::<Vec<_>>(),
        "ts" => gpu.iter().map(|r| r.3).collect::<Vec<_>>(),
        "interval_ms" => gpu.iter().map(|r| r.4).collect::<Vec<_>>(),
        "busy_mean" => gpu.iter().map(|r| r.5).collect::<Vec<_>>(),
        "sm_active_mean" => gpu.iter().map(|r| r.6).collect::<Vec<_>>(),
        "memory_used_max_bytes" => gpu.iter().map(|r| r.7).collect::<Vec<_>>(),
        "power_mean_watts" => gpu.iter().map(|r| r.8).collect::<Vec<_>>(),
        "energy_delta_joules" => gpu.iter().map(|r| r.9).collect::<Vec<_>>(),
    )
    .expect("gpu");
    let p = df!(
        "node" => process.iter().map(|r| r.0.clone()).collect::<Vec<_>>(),
        "gpu" => process.iter().map(|r| r.1).collect::<Vec<_>>(),
        "uuid" => process.iter().map(|r| r.2.clone()).collect::<Vec<_>>(),
        "ts" => process.iter().map(|r| r.3).collect::<Vec<_>>(),
        "pid" => process.iter().map(|r| r.4).collect::<Vec<_>>(),
        "process" => process.iter().map(|r| r.5.clone()).collect::<Vec<_>>(),
        "namespace" => process.iter().map(|r| r.6.clone()).collect::<Vec<_>>(),
        "pod" => process.iter().map(|r| r.7.clone()).collect::<Vec<_>>(),
        "slurm_job_id" => process.iter().map(|r| r.8.clone()).collect::<Vec<_>>(),
    )
    .expect("process");
    Frames {
        gpu: g.lazy(),
        mig: DataFrame::empty().lazy(),
        process: p.lazy(),
    }
}

/// The reference sums of one window: (GPU labels, observed, in use, busy, act h, use h, energy).
type RefSum = (BTreeSet<String>, f64, f64, f64, f64, f64, Option<f64>);
/// A team's: (processes, GPU-hours, busy, energy).
type RefTeam = (BTreeSet<String>, f64, Option<f64>, Option<f64>);

#[derive(Default)]
struct Reference {
    fleet: [RefSum; 2],
    nodes: BTreeMap<String, [RefSum; 2]>,
    teams: BTreeMap<String, [RefTeam; 2]>,
}

fn label(node: &Option<String>, g: i64) -> String {
    format!("{}/GPU{g}", node.as_deref().unwrap_or("?"))
}

fn add(
    s: &mut RefSum,
    gpu: String,
    h: f64,
    act: Option<f64>,
    in_use: Option<bool>,
    e: Option<f64>,
) {
    s.0.insert(gpu);
    s.1 += h;
    if let Some(u) = in_use {
        s.5 += h;
        if u {
            s.2 += h;
        }
    }
    if let Some(a) = act {
        s.3 += a * h;
        s.4 += h;
    }
    if let Some(e) = e {
        *s.6.get_or_insert(0.0) += e;
    }
}

fn reference(parts: &[(Vec<GpuRow>, Vec<ProcRow>)], w: &Window) -> Reference {
    let mut out = Reference::default();
    for (gpu, process) in parts {
        let mut rows: BTreeMap<(String, i64), RowFigures> = BTreeMap::new();
        for r in gpu {
            let Some(side) = w.side(r.3) else { continue };
            let iv = r.4.unwrap_or(0);
            let h = iv as f64 / HOUR_MS;
            let act = r.6.or(r.5);
            let in_use = (r.7.is_some() || act.is_some())
                .then(|| r.7.is_some_and(|m| m >= HELD) || act.is_some_and(|a| a > BUSY));
            let e = r.9.or_else(|| r.8.map(|p| p * iv as f64 / 1000.0));
            let l = label(&r.0, r.1);
            add(&mut out.fleet[side], l.clone(), h, act, in_use, e);
            let node = r.0.clone().unwrap_or_else(|| "?".into());
            add(
                &mut out.nodes.entry(node).or_default()[side],
                l.clone(),
                h,
                act,
                in_use,
                e,
            );
            rows.insert((l, r.3), (h, act, e));
        }
        let mut on: BTreeMap<(String, i64), u32> = BTreeMap::new();
        for r in process {
            if w.side(r.3).is_some() {
                *on.entry((label(&r.0, r.1), r.3)).or_default() += 1;
            }
        }
        for r in process {
            let Some(side) = w.side(r.3) else { continue };
            let team = match (&r.6, &r.8) {
                (Some(n), _) => n.clone(),
                (None, Some(j)) => format!("slurm job {j}"),
                _ => "(unattributed)".into(),
            };
            let key = crate::changes::keys::workload_key(
                r.0.as_deref(),
                Some(r.4),
                Some(&r.5),
                r.6.as_deref(),
                r.7.as_deref(),
                r.8.as_deref(),
            );
            let l = label(&r.0, r.1);
            let n = f64::from(on[&(l.clone(), r.3)]);
            let s = &mut out.teams.entry(team).or_default()[side];
            s.0.insert(key);
            if let Some(&(h, act, e)) = rows.get(&(l, r.3)) {
                s.1 += h / n;
                if let Some(a) = act {
                    *s.2.get_or_insert(0.0) += a * h / n;
                }
                if let Some(e) = e {
                    *s.3.get_or_insert(0.0) += e / n;
                }
            }
        }
    }
    out
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

fn opt_close(a: Option<f64>, b: Option<f64>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => close(a, b),
        (None, None) => true,
        _ => false,
    }
}

fn same_sum(a: &Sum<String>, b: &RefSum) -> bool {
    a.gpus == b.0
        && close(a.observed, b.1)
        && close(a.in_use, b.2)
        && close(a.busy, b.3)
        && close(a.act_h, b.4)
        && close(a.use_h, b.5)
        && opt_close(a.energy, b.6)
}

/// A partition's sums per slot of `slot_ms`, its ids interned as the change scan interns them.
fn hours(f: &Frames, slot_ms: i64) -> PartHours {
    let gpu = f.gpu.clone().collect().expect("gpu");
    let process = f.process.clone().collect().expect("process");
    let mut labels = Interner::default();
    let gpu_of = gpu_ids(&gpu, &mut labels).expect("labels");
    let process_gpu_of = gpu_ids(&process, &mut labels).expect("labels");
    let mut keys = Interner::default();
    let workload_of = workload_ids(&process, &mut keys).expect("keys");
    tally(
        Rows {
            gpu: &gpu,
            gpu_of: &gpu_of,
            process: &process,
            process_gpu_of: &process_gpu_of,
            workload_of: &workload_of,
        },
        (i64::MIN, i64::MAX),
        slot_ms,
        labels.names,
        keys.names,
    )
    .expect("tally")
}

/// Both periods of every window from the partitions' slots of one row each.
fn tally_all(parts: &[&Frames], windows: &[Window]) -> Vec<Acc> {
    let hours: Vec<PartHours> = parts.iter().map(|f| hours(f, IV)).collect();
    sum_all(&hours.iter().collect::<Vec<_>>(), windows)
}

fn check(seed: u64) {
    let mut r = Seeded::new(seed);
    let n = 30 + r.below(60) as i64;
    let parts: Vec<_> = (0..1 + r.below(3))
        .map(|k| partition(&mut r, &format!("n{k}"), n))
        .collect();
    // Two or three windows, overlapping now and then.
    let windows: Vec<Window> = (0..2 + r.below(2))
        .map(|_| {
            let len = (1 + r.below(n as u64 / 3)) as i64 * IV;
            let at = (r.below(n as u64 - 1) as i64) * IV;
            Window {
                before: (at - len, at),
                after: (at + IV, at + IV + len),
            }
        })
        .collect();
    let frames: Vec<Frames> = parts.iter().map(|(g, p)| frames(g, p)).collect();
    let got = tally_all(&frames.iter().collect::<Vec<_>>(), &windows);
    assert_eq!(got.len(), windows.len());
    for (acc, w) in got.iter().zip(&windows) {
        let want = reference(&parts, w);
        for side in 0..2 {
            assert!(
                same_sum(&acc.fleet[side], &want.fleet[side]),
                "seed {seed} fleet"
            );
        }
        assert_eq!(
            acc.nodes.keys().collect::<Vec<_>>(),
            want.nodes.keys().collect::<Vec<_>>(),
            "seed {seed}"
        );
        for (k, s) in &acc.nodes {
            for (a, b) in s.iter().zip(&want.nodes[k]) {
                assert!(same_sum(a, b), "seed {seed} node {k}");
            }
        }
        assert_eq!(
            acc.teams.keys().collect::<Vec<_>>(),
            want.teams.keys().collect::<Vec<_>>(),
            "seed {seed}"
        );
        for (k, t) in &acc.teams {
            for (a, b) in t.iter().zip(&want.teams[k]) {
                assert_eq!(a.processes, b.0, "seed {seed} team {k}");
                assert!(close(a.gpu_hours, b.1), "seed {seed} team {k}");
                assert!(opt_close(a.busy, b.2), "seed {seed} team {k}");
                assert!(opt_close(a.energy, b.3), "seed {seed} team {k}");
            }
        }
    }
}

#[test]
fn the_periods_hold_rows_and_teams() {
    // Not a comparison of empty sums: the generator's windows hold rows, GPUs and teams.
    let mut r = Seeded::new(11);
    let parts = [partition(&mut r, "n0", 60)];
    let w = Window {
        before: (0, 200_000),
        after: (210_000, 410_000),
    };
    let want = reference(&parts, &w);
    assert!(want.fleet[0].0.len() >= 2 && want.fleet[1].1 > 0.0);
    assert!(want.teams.len() >= 2);
    let frames = frames(&parts[0].0, &parts[0].1);
    let got = tally_all(&[&frames], &[w]);
    assert!(same_sum(&got[0].fleet[0], &want.fleet[0]));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    #[test]
    fn the_sums_equal_the_plain_reference(seed in any::<u64>()) {
        check(seed);
    }
}

const H: i64 = 3_600_000;

#[test]
fn periods_are_equal_whole_hours_outside_the_margin() {
    // 61 h before the change, 35 h after, 1 h margin, 5-minute rows: 34 h each side.
    let w = windows(61 * H, (0, 96 * H), None, None, H, 300_000).expect("window");
    assert_eq!(w.before, (26 * H, 60 * H));
    assert_eq!(w.after, (62 * H, 96 * H));
    // A neighbouring change bounds the period after.
    let w = windows(61 * H, (0, 96 * H), None, Some(70 * H), H, 300_000).expect("window");
    assert_eq!(w.len_ms(), 7 * H);
    // Not a whole hour on one side: none.
    assert!(windows(2 * H - 60_000, (0, 96 * H), None, None, H, 300_000).is_none());
    // A change and a range off the hour: the periods still end on whole hours, outside the
    // margin and inside the range.
    let (since, until) = (H / 2, 96 * H - H / 3);
    let at = 61 * H + 60_000;
    let w = windows(at, (since, until), None, None, H, 300_000).expect("window");
    for t in [w.before.0, w.before.1, w.after.0, w.after.1] {
        assert_eq!(t % H, 0, "{t}");
    }
    assert!(w.before.0 >= since && w.after.1 <= until);
    assert!(w.before.1 <= at - H && w.after.0 >= at + H);
    assert_eq!(w.before, (28 * H, 60 * H));
    assert_eq!(w.after, (63 * H, 95 * H));
    // A neighbour off the hour.
    let w = windows(at, (since, until), Some(50 * H + 1), None, H, 300_000).expect("window");
    assert_eq!(w.before, (52 * H, 60 * H));
    // Rows longer than the periods could be: none.
    assert!(windows(61 * H, (0, 96 * H), None, None, H, 40 * H).is_none());
}

#[test]
fn a_slot_holds_the_rows_ending_in_its_hour() {
    // Rows ending on the hour belong to the hour before (rows are `(ts − interval, ts]`).
    for (ts, k) in [(1, 1), (H, 1), (H + 1, 2), (0, 0), (-H, -1), (-H + 1, 0)] {
        assert_eq!(part::slot_of(ts, H), k, "{ts}");
    }
}

/// A fleet whose work went from `before` to `after` GPU-hours, and teams running `b` then `a`.
fn fell(before: f64, after: f64, b: &[&str], a: &[&str]) -> Option<WorkVerdict> {
    let side = |busy: f64| PeriodUsage {
        gpu_hours_busy: Some(busy),
        ..PeriodUsage::default()
    };
    let fleet = KeyedPeriods {
        key: "fleet".into(),
        before: side(before),
        after: side(after),
        delta: PeriodDelta::default(),
    };
    let set = |v: &[&str]| TeamSum {
        processes: v.iter().map(|s| s.to_string()).collect(),
        gpu_hours: 0.0,
        busy: None,
        energy: None,
    };
    let mut teams = BTreeMap::new();
    teams.insert("t".to_string(), [set(b), set(a)]);
    work_verdict(&fleet, &teams)
}

#[test]
fn work_that_fell_is_moved_when_every_workload_runs_after_and_lost_when_one_stops() {
    let moved = fell(34.0, 4.8, &["s/a", "s/b"], &["s/a", "s/b", "s/c"]).unwrap();
    assert_eq!(moved.verdict, "moved");
    assert_eq!((moved.workloads_before, moved.workloads_after), (2, 3));
    assert!(moved.gone.is_empty());
    assert!(
        moved.explanation.contains("not lost"),
        "{}",
        moved.explanation
    );
    let lost = fell(34.0, 20.0, &["s/a", "s/b"], &["s/a"]).unwrap();
    assert_eq!(lost.verdict, "lost");
    assert_eq!(
        (lost.gone.clone(), lost.gone_total),
        (vec!["s/b".to_string()], 1)
    );
    assert!(lost.explanation.contains("s/b"), "{}", lost.explanation);
    // Work that held (within 5%) or rose, or is unknown, gets no verdict.
    assert_eq!(fell(34.0, 33.0, &["s/a"], &[]), None);
    assert_eq!(fell(34.0, 40.0, &["s/a"], &[]), None);
    assert_eq!(fell(0.0, 0.0, &["s/a"], &[]), None);
}
