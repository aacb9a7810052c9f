//! The split's rule on hand-made intervals, and its invariant (Σ workloads + idle = energy, no
//! negative or non-finite share) on random ones.

use proptest::prelude::*;

use super::*;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

fn proc(sm: Option<f64>, memory: Option<f64>, instance: Option<u32>) -> Process {
    Process {
        sm,
        memory,
        instance,
    }
}

fn assert_sums(iv: &Interval, s: &Split) {
    let sum: f64 = s.processes.iter().sum::<f64>() + s.idle;
    assert!(
        close(sum, iv.energy_j),
        "{sum} != {} for {iv:?}",
        iv.energy_j
    );
    assert!(s.idle >= 0.0 && s.idle.is_finite());
    assert!(s.processes.iter().all(|j| j.is_finite() && *j >= 0.0));
    assert_eq!(s.processes.len(), iv.processes.len());
}

#[test]
fn whole_gpu_by_sm_share_and_the_rest_idle() {
    let (e, a, sm) = (1234.5, 0.6, [0.3, 0.1]);
    let iv = Interval {
        energy_j: e,
        activity: Some(a),
        processes: vec![
            proc(Some(sm[0]), Some(1e9), None),
            proc(Some(sm[1]), Some(2e9), None),
        ],
        ..Interval::default()
    };
    let s = split(&iv);
    assert_sums(&iv, &s);
    let w = e * a;
    assert!(close(s.processes[0], w * sm[0] / (sm[0] + sm[1])));
    assert!(close(s.processes[1], w * sm[1] / (sm[0] + sm[1])));
    assert!(close(s.idle, e * (1.0 - a)));
    assert!(!s.no_activity);
}

#[test]
fn without_sm_equally_among_the_processes_holding_memory() {
    let (e, a) = (900.0, 0.5);
    let iv = Interval {
        energy_j: e,
        activity: Some(a),
        processes: vec![
            proc(None, Some(4e9), None),
            proc(Some(0.0), Some(0.0), None),
            proc(None, Some(1e9), None),
        ],
        ..Interval::default()
    };
    let s = split(&iv);
    assert_sums(&iv, &s);
    assert!(close(s.processes[0], e * a / 2.0));
    assert_eq!(s.processes[1], 0.0);
    assert!(close(s.processes[2], e * a / 2.0));
    // Nobody holds memory: equally among all.
    let iv = Interval {
        processes: vec![proc(None, None, None), proc(None, Some(0.0), None)],
        ..iv
    };
    let s = split(&iv);
    assert_sums(&iv, &s);
    assert!(close(s.processes[0], s.processes[1]));
    assert!(close(s.processes[0], e * a / 2.0));
}

#[test]
fn activity_from_the_processes_when_the_gpu_has_none() {
    let e = 500.0;
    let iv = Interval {
        energy_j: e,
        activity: None,
        processes: vec![proc(Some(0.2), None, None), proc(Some(0.3), None, None)],
        ..Interval::default()
    };
    let s = split(&iv);
    assert_sums(&iv, &s);
    assert!(close(s.processes[0], e * 0.2));
    assert!(close(s.idle, e * 0.5));
    // Capped at the whole GPU.
    let iv = Interval {
        processes: vec![proc(Some(0.9), None, None), proc(Some(0.6), None, None)],
        ..iv
    };
    let s = split(&iv);
    assert_sums(&iv, &s);
    assert!(close(s.idle, 0.0));
    assert!(close(s.processes[0], e * 0.9 / 1.5));
}

#[test]
fn nothing_running_or_no_activity_is_idle() {
    let iv = Interval {
        energy_j: 321.0,
        activity: Some(0.7),
        ..Interval::default()
    };
    let s = split(&iv);
    assert_eq!(s.idle, 321.0);
    assert!(!s.no_activity, "nothing ran: idle, not unsplit");
    let iv = Interval {
        energy_j: 321.0,
        activity: None,
        processes: vec![proc(None, Some(1e9), None)],
        ..Interval::default()
    };
    let s = split(&iv);
    assert_sums(&iv, &s);
    assert_eq!(s.processes, vec![0.0]);
    assert!(s.no_activity);
    // Values that are not ratios are unknown, never a share.
    let iv = Interval {
        activity: Some(f64::NAN),
        ..iv
    };
    assert!(split(&iv).no_activity);
}

fn mig_gpu(activity: Option<f64>, inst: [(u32, u32, Option<f64>); 3]) -> Interval {
    Interval {
        energy_j: 7000.0,
        activity,
        slices: Some(7),
        instances: inst
            .iter()
            .map(|&(id, slices, activity)| Instance {
                id,
                slices,
                activity,
            })
            .collect(),
        // Two processes in instance 1, one in 2, none in 3.
        processes: vec![
            proc(None, Some(1e9), Some(1)),
            proc(None, Some(3e9), Some(1)),
            proc(None, Some(1e9), Some(2)),
        ],
    }
}

#[test]
fn mig_by_each_instances_activity_times_its_slices() {
    let iv = mig_gpu(
        Some(0.9),
        [(1, 3, Some(0.5)), (2, 1, Some(1.0)), (3, 2, Some(0.8))],
    );
    let s = split(&iv);
    assert_sums(&iv, &s);
    let e = iv.energy_j;
    // Instance 1: 0.5 × 3/7 of E, halved between its two processes; instance 2: 1/7 of E;
    // instance 3 has no process: its activity explains no workload's energy.
    assert!(close(s.processes[0], e * 0.5 * 3.0 / 7.0 / 2.0));
    assert!(close(s.processes[1], s.processes[0]));
    assert!(close(s.processes[2], e / 7.0));
    assert!(close(s.idle, e - e * (1.5 + 1.0) / 7.0));
}

#[test]
fn mig_without_instance_activity_by_the_gpus_activity_and_slices() {
    let iv = mig_gpu(Some(0.4), [(1, 3, None), (2, 1, Some(1.0)), (3, 2, None)]);
    let s = split(&iv);
    assert_sums(&iv, &s);
    let w = iv.energy_j * 0.4;
    // Loaded instances 1 (3 slices) and 2 (1 slice).
    assert!(close(s.processes[0] + s.processes[1], w * 3.0 / 4.0));
    assert!(close(s.processes[2], w / 4.0));
    // Without the GPU's activity either: only the instance with its own.
    let iv = mig_gpu(None, [(1, 3, None), (2, 1, Some(0.5)), (3, 2, None)]);
    let s = split(&iv);
    assert_sums(&iv, &s);
    assert_eq!(s.processes[0] + s.processes[1], 0.0);
    assert!(close(s.processes[2], iv.energy_j * 0.5 / 7.0));
    assert!(!s.no_activity);
    // Nothing at all: idle, said so.
    let iv = mig_gpu(None, [(1, 3, None), (2, 1, None), (3, 2, None)]);
    let s = split(&iv);
    assert_sums(&iv, &s);
    assert!(s.no_activity);
    assert_eq!(s.idle, iv.energy_j);
}

#[test]
fn mig_slices_beyond_the_gpu_are_scaled_to_it() {
    let mut iv = mig_gpu(None, [(1, 7, Some(1.0)), (2, 7, Some(1.0)), (3, 2, None)]);
    let s = split(&iv);
    assert_sums(&iv, &s);
    assert!(close(s.idle, 0.0));
    // Unknown GPU slices: the larger of 7 and the instances'.
    iv.slices = None;
    let s = split(&iv);
    assert_sums(&iv, &s);
    assert!(close(
        s.processes.iter().sum::<f64>(),
        iv.energy_j * 14.0 / 16.0
    ));
}

#[test]
fn profile_names_give_their_compute_slices() {
    for (name, n) in [
        ("3g.40gb", Some(3)),
        ("1g.10gb+me", Some(1)),
        ("7g.80gb", Some(7)),
        ("1c.3g.40gb", Some(3)),
        ("gpu", None),
        ("0g.1gb", None),
    ] {
        assert_eq!(profile_slices(name), n, "{name}");
    }
}

fn ratio_value() -> impl Strategy<Value = Option<f64>> {
    prop_oneof![
        Just(None),
        Just(Some(0.0)),
        Just(Some(1.0)),
        (0.0f64..=1.0).prop_map(Some),
        (-2.0f64..3.0).prop_map(Some),
        Just(Some(f64::NAN)),
    ]
}

fn interval() -> impl Strategy<Value = Interval> {
    let procs = prop::collection::vec(
        (
            ratio_value(),
            prop_oneof![Just(None), (0.0f64..1e11).prop_map(Some)],
            prop_oneof![Just(None), (0u32..5).prop_map(Some)],
        )
            .prop_map(|(sm, memory, instance)| Process {
                sm,
                memory,
                instance,
            }),
        0..6,
    );
    let insts = prop::collection::vec(
        (0u32..5, 1u32..8, ratio_value()).prop_map(|(id, slices, activity)| Instance {
            id,
            slices,
            activity,
        }),
        0..5,
    );
    (
        prop_oneof![Just(0.0), 0.0f64..1e7, Just(8.64e9)],
        ratio_value(),
        prop_oneof![Just(None), (1u32..8).prop_map(Some)],
        insts,
        procs,
    )
        .prop_map(
            |(energy_j, activity, slices, instances, processes)| Interval {
                energy_j,
                activity,
                slices,
                instances,
                processes,
            },
        )
}

proptest! {
    #[test]
    fn every_interval_adds_up_to_its_energy(iv in interval()) {
        let s = split(&iv);
        let sum: f64 = s.processes.iter().sum::<f64>() + s.idle;
        prop_assert!(close(sum, iv.energy_j), "{} != {}", sum, iv.energy_j);
        prop_assert!(s.idle.is_finite() && s.idle >= 0.0);
        for j in &s.processes {
            prop_assert!(j.is_finite() && *j >= 0.0 && *j <= iv.energy_j * (1.0 + 1e-12));
        }
        if s.no_activity {
            prop_assert_eq!(s.idle, iv.energy_j);
        }
    }
}

#[test]
fn split_into_a_reused_buffer_equals_split_and_idle_alone_equals_an_interval_without_processes() {
    // Odd values (negative zero, non-finite, MIG and whole-GPU intervals) through one buffer:
    // the same bits as `split`, whatever the buffer held before.
    let mut buf = vec![9.0; 5];
    let procs = |n: usize, mig: bool| -> Vec<Process> {
        (0..n)
            .map(|k| Process {
                sm: (k % 3 != 0).then_some(0.1 * k as f64),
                memory: (k % 2 == 0).then_some(1e9),
                instance: mig.then_some(k as u32 % 2),
            })
            .collect()
    };
    for e in [0.0, -0.0, 1.5, 250.0, f64::NAN, f64::INFINITY] {
        assert_eq!(
            idle_alone(e).to_bits(),
            split(&Interval {
                energy_j: e,
                activity: Some(0.4),
                ..Interval::default()
            })
            .idle
            .to_bits()
        );
        for n in 0..4 {
            for mig in [false, true] {
                let iv = Interval {
                    energy_j: e,
                    activity: (n != 2).then_some(0.3),
                    slices: Some(7),
                    instances: if mig {
                        vec![
                            Instance {
                                id: 0,
                                slices: 3,
                                activity: Some(0.5),
                            },
                            Instance {
                                id: 1,
                                slices: 4,
                                activity: None,
                            },
                        ]
                    } else {
                        Vec::new()
                    },
                    processes: procs(n, mig),
                };
                let want = split(&iv);
                let (idle, no_activity) = split_into(&iv, &mut buf);
                assert_eq!(idle.to_bits(), want.idle.to_bits(), "{e} {n} {mig}");
                assert_eq!(no_activity, want.no_activity);
                let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&buf), bits(&want.processes));
            }
        }
    }
}

/// The MIG split and the equal split as they were written before they stopped collecting
/// lists per interval: the reference the allocation-free versions must equal bit for bit.
mod collected {
    use super::super::{Instance, Interval, Process, ratio};

    fn to_processes(part: f64, idx: &[usize], procs: &[Process], out: &mut [f64]) {
        if idx.is_empty() || part <= 0.0 {
            return;
        }
        let sm = |i: usize| ratio(procs[i].sm).unwrap_or(0.0);
        let sm_sum: f64 = idx.iter().map(|&i| sm(i)).sum();
        if sm_sum > 0.0 {
            for &i in idx {
                out[i] += part * (sm(i) / sm_sum);
            }
            return;
        }
        let holding: Vec<usize> = idx
            .iter()
            .copied()
            .filter(|&i| procs[i].memory.is_some_and(|m| m.is_finite() && m > 0.0))
            .collect();
        let to: Vec<usize> = if holding.is_empty() {
            idx.to_vec()
        } else {
            holding
        };
        let each = part / to.len() as f64;
        for i in to {
            out[i] += each;
        }
    }

    /// The processes' joules of a MIG interval (`None`: no activity to split by).
    pub fn split_mig(e: f64, iv: &Interval) -> Option<Vec<f64>> {
        let mut out = vec![0.0; iv.processes.len()];
        let total = f64::from(
            iv.slices
                .filter(|&s| s > 0)
                .unwrap_or_else(|| iv.instances.iter().map(|i| i.slices).sum::<u32>().max(7)),
        );
        let mut loaded: Vec<(&Instance, Vec<usize>)> = Vec::new();
        for inst in &iv.instances {
            if loaded.iter().any(|(i, _)| i.id == inst.id) {
                continue;
            }
            let procs: Vec<usize> = (0..iv.processes.len())
                .filter(|&p| iv.processes[p].instance == Some(inst.id))
                .collect();
            if !procs.is_empty() {
                loaded.push((inst, procs));
            }
        }
        if loaded.is_empty() {
            return Some(out);
        }
        let own = |i: &Instance| ratio(i.activity).map(|s| s * f64::from(i.slices) / total);
        let slices: f64 = loaded.iter().map(|(i, _)| f64::from(i.slices)).sum();
        let shares: Vec<f64> = match ratio(iv.activity) {
            Some(a) if slices > 0.0 && loaded.iter().any(|(i, _)| own(i).is_none()) => loaded
                .iter()
                .map(|(i, _)| a * f64::from(i.slices) / slices)
                .collect(),
            _ => {
                if loaded.iter().all(|(i, _)| own(i).is_none()) {
                    return None;
                }
                loaded.iter().map(|(i, _)| own(i).unwrap_or(0.0)).collect()
            }
        };
        let sum: f64 = shares.iter().sum();
        let scale = if sum > 1.0 { 1.0 / sum } else { 1.0 };
        for ((_, procs), share) in loaded.iter().zip(shares) {
            to_processes(e * share * scale, procs, &iv.processes, &mut out);
        }
        Some(out)
    }
}

proptest! {
    #[test]
    fn the_mig_split_equals_its_collecting_reference_bit_for_bit(iv in interval()) {
        prop_assume!(!iv.instances.is_empty());
        let s = split(&iv);
        let e = if iv.energy_j.is_finite() { iv.energy_j.max(0.0) } else { 0.0 };
        match collected::split_mig(e, &iv) {
            Some(want) => {
                prop_assert!(!s.no_activity || iv.processes.is_empty());
                let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                prop_assert_eq!(bits(&s.processes), bits(&want));
            }
            None => prop_assert!(s.no_activity),
        }
    }
}

proptest! {
    #[test]
    fn one_process_outside_mig_splits_bit_for_bit_as_the_general_rule(
        energy_j in prop_oneof![Just(0.0), Just(-0.0), 0.0f64..1e7, Just(f64::INFINITY), Just(f64::NAN)],
        activity in ratio_value(),
        sm in ratio_value(),
        memory in prop_oneof![Just(None), Just(Some(0.0)), (0.0f64..1e11).prop_map(Some)],
        instance in prop_oneof![Just(None), (0u32..5).prop_map(Some)],
    ) {
        let iv = Interval {
            energy_j,
            activity,
            slices: None,
            instances: Vec::new(),
            processes: vec![Process { sm, memory, instance }],
        };
        let mut out = vec![7.0];
        let (idle, no_activity) = split_into(&iv, &mut out);
        let (one_idle, share) = super::split_one(energy_j, activity, || sm);
        prop_assert_eq!(one_idle.to_bits(), idle.to_bits());
        match share {
            Some(j) => {
                prop_assert!(!no_activity);
                prop_assert_eq!(j.to_bits(), out[0].to_bits());
            }
            None => prop_assert!(no_activity),
        }
    }
}

mod partition {
    //! [`contributions`] (intervals made from the GPU table) against [`contributions_of`] with
    //! intervals an [`IntervalsBuilder`] made from the same rows walked GPU by GPU in `ts` order
    //! (what the report's tallies do), and the intervals against a reference written here: one
    //! per GPU and `ts` that has a row of known energy, the first such row's.

    use std::collections::BTreeMap;

    use polars::prelude::*;
    use proptest::prelude::*;

    use crate::energy::{Held, IntervalsBuilder, contributions, contributions_of};
    use crate::frames::Frames;

    /// A GPU row: GPU (node, index; uuid from both), ts, energy, SM activity.
    type G = (u8, i64, i64, Option<f64>, Option<f64>);
    /// A process row: GPU, ts, pid, namespace, sm, MIG instance.
    type P = (u8, i64, i64, u8, Option<f64>, Option<i64>);
    /// A MIG row: GPU, ts, GPU instance.
    type M = (u8, i64, i64);
    /// A GPU's rows as the walk gives them: ts, energy, activity.
    type Walked = Vec<(i64, Option<f64>, Option<f64>)>;

    fn gpu_of(g: u8) -> (String, i64, String) {
        let node = format!("n{}", g % 2);
        (
            node.clone(),
            i64::from(g / 2),
            format!("GPU-{node}-{}", g / 2),
        )
    }

    fn frames(gpu: &[G], mig: &[M], process: &[P]) -> Frames {
        let gs: Vec<_> = gpu.iter().map(|r| gpu_of(r.0)).collect();
        let g = df!(
            "node" => gs.iter().map(|x| x.0.clone()).collect::<Vec<_>>(),
            "uuid" => gs.iter().map(|x| x.2.clone()).collect::<Vec<_>>(),
            "gpu" => gs.iter().map(|x| x.1).collect::<Vec<_>>(),
            "model" => gs.iter().map(|_| "NVIDIA H100 80GB HBM3").collect::<Vec<_>>(),
            "ts" => gpu.iter().map(|r| r.1).collect::<Vec<_>>(),
            "interval_ms" => gpu.iter().map(|_| 10_000i64).collect::<Vec<_>>(),
            "sm_active_mean" => gpu.iter().map(|r| r.4).collect::<Vec<_>>(),
            "busy_mean" => gpu.iter().map(|_| None::<f64>).collect::<Vec<_>>(),
            "power_mean_watts" => gpu.iter().map(|_| None::<f64>).collect::<Vec<_>>(),
            "energy_delta_joules" => gpu.iter().map(|r| r.3).collect::<Vec<_>>(),
        )
        .expect("gpu");
        let ms: Vec<_> = mig.iter().map(|r| gpu_of(r.0)).collect();
        let m = df!(
            "node" => ms.iter().map(|x| x.0.clone()).collect::<Vec<_>>(),
            "uuid" => ms.iter().map(|x| x.2.clone()).collect::<Vec<_>>(),
            "gpu" => ms.iter().map(|x| x.1).collect::<Vec<_>>(),
            "gpu_instance" => mig.iter().map(|r| r.2).collect::<Vec<_>>(),
            "ts" => mig.iter().map(|r| r.1).collect::<Vec<_>>(),
            "profile" => mig.iter().map(|_| "3g.40gb").collect::<Vec<_>>(),
            "sm_active_mean" => mig.iter().map(|_| Some(0.5)).collect::<Vec<_>>(),
        )
        .expect("mig");
        let ps: Vec<_> = process.iter().map(|r| gpu_of(r.0)).collect();
        let p = df!(
            "node" => ps.iter().map(|x| x.0.clone()).collect::<Vec<_>>(),
            "uuid" => ps.iter().map(|x| x.2.clone()).collect::<Vec<_>>(),
            "gpu" => ps.iter().map(|x| x.1).collect::<Vec<_>>(),
            "gpu_instance" => process.iter().map(|r| r.5).collect::<Vec<_>>(),
            "ts" => process.iter().map(|r| r.1).collect::<Vec<_>>(),
            "pid" => process.iter().map(|r| r.2).collect::<Vec<_>>(),
            "namespace" => process.iter().map(|r| format!("team{}", r.3)).collect::<Vec<_>>(),
            "slurm_job_id" => process.iter().map(|_| None::<String>).collect::<Vec<_>>(),
            "memory_used_max_bytes" => process.iter().map(|_| Some(1e9)).collect::<Vec<_>>(),
            "sm_mean" => process.iter().map(|r| r.4).collect::<Vec<_>>(),
        )
        .expect("process");
        Frames {
            gpu: g.lazy(),
            mig: m.lazy(),
            process: p.lazy(),
        }
    }

    fn energy() -> impl Strategy<Value = Option<f64>> {
        prop_oneof![
            3 => (0.0f64..5000.0).prop_map(Some),
            1 => Just(None),
            1 => Just(Some(-1.0)),
            1 => Just(Some(f64::NAN)),
        ]
    }

    fn rows() -> impl Strategy<Value = (Vec<G>, Vec<M>, Vec<P>)> {
        let ts = (1i64..8).prop_map(|t| t * 10_000);
        let sm = prop_oneof![Just(None), (0.0f64..=1.0).prop_map(Some)];
        (
            prop::collection::vec((0u8..5, ts.clone(), energy(), sm.clone()), 0..40),
            prop::collection::vec((0u8..5, ts.clone(), 0i64..3), 0..8),
            prop::collection::vec(
                (
                    0u8..6,
                    ts,
                    1i64..4,
                    0u8..3,
                    sm,
                    prop_oneof![Just(None), (0i64..3).prop_map(Some)],
                ),
                0..40,
            ),
        )
            .prop_map(|(g, m, p)| {
                let g = g.into_iter().map(|(a, b, c, d)| (a, b, 0, c, d)).collect();
                (g, m, p)
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]
        #[test]
        fn intervals_made_by_a_walk_split_as_those_made_from_the_gpu_table((gpu, mig, process) in rows()) {
            let f = frames(&gpu, &mig, &process);
            let range = (10_000, 60_000);
            let key = |p: &crate::energy::ProcessRef| p.namespace.map(str::to_string);
            let read = contributions(&f, range, Held::Lazy, key).expect("read");
            // The walk: each GPU in (node, index, uuid) order, its rows in range by `ts`,
            // stably (row order within a `ts`).
            let mut per: BTreeMap<(String, i64, String), Walked> = BTreeMap::new();
            for r in gpu.iter().filter(|r| r.1 > range.0 && r.1 <= range.1) {
                let (n, i, u) = gpu_of(r.0);
                per.entry((n, i, u)).or_default().push((r.1, r.3, r.4));
            }
            let mut b = IntervalsBuilder::default();
            // The reference: per GPU and `ts`, the first row's energy among those known.
            let mut want: Vec<f64> = Vec::new();
            for ((n, i, u), rows) in &mut per {
                rows.sort_by_key(|r| r.0);
                b.gpu(Some(n), Some(u), Some(*i), Some("NVIDIA H100 80GB HBM3"));
                let mut last = None;
                for &(ts, e, a) in rows.iter() {
                    b.row(ts, e, a);
                    if let Some(e) = e.filter(|e| e.is_finite() && *e >= 0.0)
                        && last != Some(ts)
                    {
                        want.push(e);
                        last = Some(ts);
                    }
                }
            }
            let walked = contributions_of(&f, range, Held::Lazy, b.finish(), key).expect("walk");
            let bits = |v: &[(f64, f64)]| v.iter().map(|(a, b)| (a.to_bits(), b.to_bits())).collect::<Vec<_>>();
            prop_assert_eq!(bits(&read.intervals), bits(&walked.intervals));
            let got: Vec<f64> = read.intervals.iter().map(|x| x.0).collect();
            prop_assert_eq!(got, want);
            prop_assert_eq!(&read.keys, &walked.keys);
            let shares = |v: &[(usize, f64)]| v.iter().map(|(k, j)| (*k, j.to_bits())).collect::<Vec<_>>();
            prop_assert_eq!(shares(&read.shares), shares(&walked.shares));
            prop_assert_eq!(read.unmatched, walked.unmatched);
            prop_assert_eq!(read.no_activity_j.to_bits(), walked.no_activity_j.to_bits());
        }
    }
}

#[test]
fn a_gpu_given_twice_to_the_builder_gets_no_second_run_of_rows() {
    let mut b = IntervalsBuilder::default();
    b.gpu(Some("n0"), Some("GPU-a"), Some(0), None);
    b.row(10, Some(5.0), Some(0.5));
    b.row(10, Some(7.0), Some(0.5));
    b.row(20, None, Some(0.5));
    b.gpu(Some("n0"), Some("GPU-a"), Some(0), None);
    b.row(30, Some(9.0), Some(0.5));
    b.gpu(Some("n0"), Some("GPU-b"), Some(1), None);
    b.row(30, Some(3.0), None);
    let c = contributions_of(
        &crate::frames::Frames::empty(),
        (0, 100),
        Held::Lazy,
        b.finish(),
        |_| None::<u8>,
    )
    .expect("split");
    // The first row of ts 10 (5 J), nothing of the repeated GPU, then GPU-b's 3 J.
    let e: Vec<f64> = c.intervals.iter().map(|x| x.0).collect();
    assert_eq!(e, vec![5.0, 3.0]);
}
