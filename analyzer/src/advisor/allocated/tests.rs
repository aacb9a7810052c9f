use super::*;

const MIN: i64 = 60_000;
const T0: i64 = 1_793_577_600_000; // 2026-11-02T00:00Z
const GIB: f64 = (1u64 << 30) as f64;

/// One gpu or mig row: (uuid, minute of its end, holders, namespace, pod, job, memory GiB,
/// activity).
type R<'a> = (
    &'a str,
    i64,
    Option<u32>,
    Option<&'a str>,
    Option<&'a str>,
    Option<&'a str>,
    Option<f64>,
    Option<f64>,
);

fn gpu_frame(rows: &[R]) -> LazyFrame {
    let n = rows.len();
    df!(
        "node" => vec!["n1"; n],
        "uuid" => rows.iter().map(|r| r.0).collect::<Vec<_>>(),
        "gpu" => rows.iter().map(|r| r.0.trim_start_matches("GPU-").parse::<u32>().unwrap_or(0)).collect::<Vec<_>>(),
        "model" => vec![Some("H100"); n],
        "ts" => rows.iter().map(|r| T0 + r.1 * MIN).collect::<Vec<_>>(),
        "interval_ms" => vec![10 * MIN; n],
        "holders" => rows.iter().map(|r| r.2).collect::<Vec<_>>(),
        "holder_namespace" => rows.iter().map(|r| r.3).collect::<Vec<_>>(),
        "holder_pod" => rows.iter().map(|r| r.4).collect::<Vec<_>>(),
        "holder_slurm_job_id" => rows.iter().map(|r| r.5).collect::<Vec<_>>(),
        "memory_used_max_bytes" => rows.iter().map(|r| r.6.map(|g| g * GIB)).collect::<Vec<_>>(),
        "sm_active_max" => rows.iter().map(|r| r.7).collect::<Vec<_>>(),
        "busy_max" => vec![None::<f64>; n],
        "mig_enabled" => vec![Some(false); n],
    )
    .unwrap()
    .lazy()
}

/// `count` rows of 10 minutes, the first ending at minute `from + 10`.
fn run<'a>(
    uuid: &'a str,
    from: i64,
    count: i64,
    holder: (
        Option<u32>,
        Option<&'a str>,
        Option<&'a str>,
        Option<&'a str>,
    ),
    mem: Option<f64>,
    act: Option<f64>,
) -> Vec<R<'a>> {
    (1..=count)
        .map(|k| {
            (
                uuid,
                from + 10 * k,
                holder.0,
                holder.1,
                holder.2,
                holder.3,
                mem,
                act,
            )
        })
        .collect()
}

fn frames(gpu: Vec<R>, processes: &[(&str, i64)]) -> Frames {
    // GPU-9's instance GI2 (MIG-a) held by nb-1, and two instances of GPU-8 without a MIG
    // uuid (as dcgm-exporter's rows come) held by two pods: three devices, not two.
    let n = 36;
    let ts: Vec<i64> = (0..n).map(|k| T0 + 10 * (k % 12 + 1) * MIN).collect();
    fn pick<T: Copy>(n: i64, a: T, b: T, c: T) -> Vec<T> {
        (0..n).map(|k| [a, b, c][(k / 12) as usize]).collect()
    }
    let mig = df!(
        "node" => vec!["n1"; n as usize],
        "uuid" => pick(n, "GPU-9", "GPU-8", "GPU-8"),
        "gpu" => pick(n, 9u32, 8, 8),
        "gpu_instance" => pick(n, 2u32, 1, 2),
        "mig_uuid" => pick(n, Some("MIG-a"), None, None),
        "profile" => vec!["3g.40gb"; n as usize],
        "ts" => ts,
        "interval_ms" => vec![10 * MIN; n as usize],
        "holders" => vec![Some(1u32); n as usize],
        "holder_namespace" => vec![Some("team-b"); n as usize],
        "holder_pod" => pick(n, Some("nb-1"), Some("nb-2"), Some("nb-3")),
        "holder_slurm_job_id" => vec![None::<&str>; n as usize],
        "memory_used_max_bytes" => vec![Some(0.0f64); n as usize],
        "sm_active_max" => vec![None::<f64>; n as usize],
    )
    .unwrap();
    // Every process row has a pid, but for a pod-labelled row (dcgm-exporter's kind) on GPU-0
    // each interval, which says who holds the GPU, not that anything runs there.
    let pod_rows: Vec<(&str, i64)> = (1..=18).map(|k| ("GPU-0", 10 * k)).collect();
    let all: Vec<(&str, i64, Option<u32>)> = processes
        .iter()
        .map(|p| (p.0, p.1, Some(7u32)))
        .chain(pod_rows.iter().map(|p| (p.0, p.1, None)))
        .collect();
    let process = df!(
        "node" => vec!["n1"; all.len()],
        "uuid" => all.iter().map(|p| p.0).collect::<Vec<_>>(),
        "pid" => all.iter().map(|p| p.2).collect::<Vec<_>>(),
        "gpu_instance" => vec![None::<u32>; all.len()],
        "ts" => all.iter().map(|p| T0 + p.1 * MIN).collect::<Vec<_>>(),
    )
    .unwrap();
    Frames {
        gpu: gpu_frame(&gpu),
        mig: mig.lazy(),
        process: process.lazy(),
    }
}

fn evidence(f: &Finding) -> &AllocatedEvidence {
    match &f.evidence {
        Evidence::Allocated(e) => e,
        other => panic!("not allocated evidence: {other:?}"),
    }
}

use super::super::Evidence;

#[test]
fn held_with_nothing_running_is_unused_and_low_use_is_milder() {
    let pod = |p| (Some(1), Some("team-a"), Some(p), None);
    let job = (Some(1), None, None, Some("4242"));
    let mut gpu = Vec::new();
    // GPU-0: a notebook pod holds it for 3 h and never starts anything.
    gpu.extend(run("GPU-0", 0, 18, pod("nb-0"), Some(0.5), Some(0.0)));
    // GPU-1: the Slurm job's one used GPU, lightly (5%): low use.
    gpu.extend(run("GPU-1", 0, 18, job, Some(20.0), Some(0.05)));
    // GPU-2: the job's GPU at 60%: fine. GPU-3: the job holds it, nothing runs: unused.
    gpu.extend(run("GPU-2", 0, 18, job, Some(30.0), Some(0.6)));
    gpu.extend(run("GPU-3", 0, 18, job, Some(0.5), Some(0.0)));
    // GPU-4: free (held by nobody), idle: nothing.
    gpu.extend(run(
        "GPU-4",
        0,
        18,
        (Some(0), None, None, None),
        Some(0.5),
        Some(0.0),
    ));
    // GPU-5: pod x then pod y, each 2 h unused: two findings.
    gpu.extend(run("GPU-5", 0, 12, pod("x"), Some(0.5), None));
    gpu.extend(run("GPU-5", 120, 12, pod("y"), Some(0.5), None));
    // GPU-6: held, nothing loaded, but a process row every interval (a process that holds no
    // memory yet): not unused; activity 0 over the held time → low use.
    gpu.extend(run("GPU-6", 0, 18, pod("z"), Some(0.5), Some(0.0)));
    let procs: Vec<(&str, i64)> = (1..=18)
        .flat_map(|k| [("GPU-1", 10 * k), ("GPU-6", 10 * k)])
        .collect();
    // GPU-7: held but without memory (occupancy data): not judged, counted in a note.
    gpu.extend(run("GPU-7", 0, 18, pod("occ"), None, None));
    let f = frames(gpu, &procs);
    let out = AllocatedUnused.check(&f, &Params::default()).unwrap();
    let by: BTreeMap<String, &Finding> = out
        .findings
        .iter()
        .map(|f| {
            (
                format!(
                    "{}:{}",
                    f.entity
                        .mig_uuid
                        .as_deref()
                        .or(f.entity.uuid.as_deref())
                        .unwrap(),
                    f.entity
                        .pod
                        .as_deref()
                        .or(f.entity.slurm_job.as_deref())
                        .unwrap()
                ),
                f,
            )
        })
        .collect();
    let keys: Vec<&str> = by.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "GPU-0:nb-0",
            "GPU-1:4242",
            "GPU-3:4242",
            "GPU-5:x",
            "GPU-5:y",
            "GPU-6:z",
            "GPU-8:nb-2",
            "GPU-8:nb-3",
            "MIG-a:nb-1"
        ],
        "{out:#?}"
    );
    let e0 = evidence(by["GPU-0:nb-0"]);
    assert_eq!(
        (e0.kind.as_str(), e0.held_hours, e0.unused_hours),
        ("unused", 3.0, 3.0)
    );
    assert_eq!(e0.spans.len(), 1);
    assert_eq!(e0.spans[0].start, "2026-11-02T00:00:00.000Z");
    assert_eq!(e0.spans[0].end, "2026-11-02T03:00:00.000Z");
    assert_eq!(by["GPU-0:nb-0"].severity, Severity::Warning);
    assert_eq!(by["GPU-0:nb-0"].entity.namespace.as_deref(), Some("team-a"));
    let e1 = evidence(by["GPU-1:4242"]);
    assert_eq!(
        (e1.kind.as_str(), e1.activity_mean),
        ("low_use", Some(0.05))
    );
    assert_eq!(e1.wasted_gpu_hours, 2.85);
    assert_eq!(by["GPU-1:4242"].severity, Severity::Info);
    assert_eq!(evidence(by["GPU-3:4242"]).unused_hours, 3.0);
    assert_eq!(evidence(by["GPU-5:x"]).unused_hours, 2.0);
    assert_eq!(
        evidence(by["GPU-5:y"]).spans[0].start,
        "2026-11-02T02:00:00.000Z"
    );
    assert_eq!(evidence(by["GPU-6:z"]).kind, "low_use");
    // The MIG instance: 2 h unused, weighted by its 3 of 7 compute slices.
    let m = evidence(by["MIG-a:nb-1"]);
    assert_eq!(
        (m.unused_hours, m.wasted_gpu_hours),
        (2.0, r3(2.0 * 3.0 / 7.0))
    );
    assert_eq!(by["MIG-a:nb-1"].entity.gpu_instance, Some(2));
    // Unused first (most GPU-hours), then low use.
    assert_eq!(out.findings[0].severity, Severity::Warning);
    assert_eq!(out.findings.last().unwrap().severity, Severity::Info);
    assert!(
        out.notes
            .iter()
            .any(|n| n.starts_with("18 row(s) of held devices have no memory value")),
        "{:?}",
        out.notes
    );
    // Held GPU-hours: GPU-0..3, 5, 6, 7 held 3 h each (5: 2 + 2), three instances 2 h × 3/7
    // each (GPU-8's two have no MIG uuid and stay two devices).
    let inst = 3.0 * 2.0 * 3.0 / 7.0;
    assert_eq!(out.data["held_gpu_hours"], r3(3.0 * 6.0 + 4.0 + inst));
    assert_eq!(
        out.data["unused_gpu_hours"],
        r3(3.0 + 3.0 + 2.0 + 2.0 + inst)
    );
}

#[test]
fn short_spans_gaps_and_unknown_holders() {
    let pod = (Some(1), Some("ns"), Some("p"), None);
    // 50 min unused, a 40-minute hole, 50 min unused: no span of 60 min.
    let mut gpu = run("GPU-0", 0, 5, pod, Some(0.2), Some(0.0));
    gpu.extend(run("GPU-0", 90, 5, pod, Some(0.2), Some(0.0)));
    let f = frames(gpu, &[]);
    let out = AllocatedUnused.check(&f, &Params::default()).unwrap();
    assert!(
        !out.findings
            .iter()
            .any(|f| f.entity.uuid.as_deref() == Some("GPU-0") && evidence(f).kind == "unused"),
        "{out:#?}"
    );
    // No holders anywhere: no finding, and the summary says why.
    let none = Frames {
        gpu: gpu_frame(&run(
            "GPU-0",
            0,
            18,
            (None, None, None, None),
            Some(0.2),
            Some(0.0),
        )),
        mig: DataFrame::empty().lazy(),
        process: DataFrame::empty().lazy(),
    };
    let mut none = none;
    none.mig = frames(Vec::new(), &[]).mig.filter(lit(false));
    let out = AllocatedUnused.check(&none, &Params::default()).unwrap();
    assert!(out.findings.is_empty());
    assert!(
        out.summary.starts_with("no allocation data"),
        "{}",
        out.summary
    );
    assert_eq!(out.data["allocation_known"], false);
}
