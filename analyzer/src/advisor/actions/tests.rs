use super::*;
use crate::advisor::Severity;
use crate::advisor::evidence::{
    AllocatedEvidence, ConsolidationEvidence, IdleEvidence, PlanGpu, PlanWorkload,
};

fn entity(gpu: u32, pod: Option<&str>, job: Option<&str>) -> Entity {
    Entity {
        kind: "process".into(),
        node: Some("n1".into()),
        gpu: Some(gpu),
        uuid: Some(format!("GPU-{gpu}")),
        namespace: pod.map(|_| "team".to_string()),
        pod: pod.map(str::to_string),
        slurm_job: job.map(str::to_string),
        ..Entity::default()
    }
}

fn idle(gpu: u32, share: f64, pod: Option<&str>, job: Option<&str>) -> Finding {
    Finding::new(
        format!("idle-{gpu}"),
        Severity::Warning,
        entity(gpu, pod, job),
        "idle".into(),
        "scale".into(),
        IdleEvidence {
            activity_source: "process_sm".into(),
            idle_gib_hours: 10.0,
            idle_hours: 100.0 * share,
            idle_share: share,
            memory_max_gib: 1.0,
            observed_hours: 100.0,
            reclaimable_gpu_hours: 100.0 * share,
            spans: Vec::new(),
        },
    )
}

fn allocated(gpu: u32) -> Finding {
    Finding::new(
        format!("alloc-{gpu}"),
        Severity::Warning,
        entity(gpu, Some("holder"), None),
        "held".into(),
        "release".into(),
        AllocatedEvidence {
            activity_mean: None,
            held_hours: 100.0,
            kind: "unused".into(),
            spans: Vec::new(),
            unused_hours: 50.0,
            wasted_gpu_hours: 50.0,
        },
    )
}

fn plan_workload(gpu: u32, scheduler: Scheduler) -> PlanWorkload {
    PlanWorkload {
        activity_peak: 0.1,
        activity_source: "sm_active".into(),
        gpu: Some(gpu),
        label: format!("n1/GPU{gpu}"),
        memory_peak_gib: 1.0,
        moved_by: None,
        node: Some("n1".into()),
        scheduler,
        uuid: Some(format!("GPU-{gpu}")),
    }
}

/// One consolidation finding: each group a host and the GPUs moved onto it.
fn consolidation(groups: &[(u32, &[u32])], scheduler: Scheduler) -> Finding {
    let plan = groups
        .iter()
        .map(|(host, moved)| PlanGroup {
            combined_activity_max: 0.5,
            combined_activity_p95: 0.4,
            combined_activity_p99: 0.45,
            combined_memory_peak_gib: 10.0,
            host: PlanGpu {
                gpu: Some(*host),
                node: Some("n1".into()),
                uuid: Some(format!("GPU-{host}")),
            },
            memory_headroom: 0.2,
            over_capacity_share: 0.0,
            risk_over_target_share: 0.0,
            workloads: std::iter::once(*host)
                .chain(moved.iter().copied())
                .map(|g| plan_workload(g, scheduler))
                .collect(),
        })
        .collect();
    Finding::new(
        "consolidation-1".into(),
        Severity::Warning,
        Entity {
            kind: "gpu_model".into(),
            ..Entity::default()
        },
        "fits".into(),
        "co-locate".into(),
        ConsolidationEvidence {
            capacity_gib: 80.0,
            compute_target: 0.8,
            gpu_hours_freed: 100.0,
            gpus_freed: groups.iter().map(|g| g.1.len()).sum(),
            gpus_loaded: 8,
            gpus_needed: 4,
            headroom: 0.2,
            model: "H100".into(),
            plan,
            quantile: 0.95,
            step_seconds: 300,
        },
    )
}

fn ctx(sources: &[String]) -> ActionContext<'_> {
    ActionContext {
        sources,
        period_hours: 100.0,
        prices: None,
        range: &[],
    }
}

/// Every workload key of `actions`, checking none is in two actions.
fn keys(actions: &[Action]) -> BTreeMap<String, &'static str> {
    let mut out = BTreeMap::new();
    for a in actions {
        for w in &a.workloads {
            assert!(
                out.insert(w.key.clone(), a.kind).is_none(),
                "{} twice",
                w.key
            );
        }
    }
    out
}

#[test]
fn idle_the_whole_period_comes_before_the_plans_and_shrinks_them() {
    let src = vec!["history:/h".to_string()];
    let findings = vec![
        idle(1, 1.0, Some("a"), None),
        allocated(1),
        allocated(5),
        consolidation(&[(0, &[1, 2]), (5, &[6])], Scheduler::Kubernetes),
    ];
    let a = recommend(&findings, None, &ctx(&src));
    let k = keys(&a);
    assert_eq!(k["GPU-1"], "scale_to_zero");
    assert_eq!(k["GPU-5"], "release");
    // GPU 1 left its group; the group of host 5 went with its host.
    assert_eq!(k["GPU-0"], "consolidate");
    assert_eq!(k["GPU-2"], "consolidate");
    assert!(!k.contains_key("GPU-6"));
    let c = a.iter().find(|a| a.kind == "consolidate").unwrap();
    assert_eq!(c.gpus_freed, Some(1));
    // The allocated finding of GPU 1 is answered by the scale to zero, which says so.
    let s = a.iter().find(|a| a.kind == "scale_to_zero").unwrap();
    assert_eq!(
        s.findings,
        vec!["idle-1".to_string(), "alloc-1".to_string()]
    );
    assert_eq!(s.overruled[0].candidate, "release");
    // Saving per month: 100 GPU-h in 100 h → 730 GPU-h a month; ranked first.
    assert_eq!(s.gpu_hours_per_month, 730.0);
    assert_eq!(s.rank, 1);
    assert!(
        s.steps[0]
            .command
            .starts_with("tessera scale-down --source history:/h --namespace team")
    );
    let ranks: Vec<usize> = a.iter().map(|a| a.rank).collect();
    assert_eq!(ranks, (1..=a.len()).collect::<Vec<_>>());
}

#[test]
fn the_plan_that_frees_more_wins_and_says_why_the_other_lost() {
    let src = vec!["history:/h".to_string()];
    let findings = vec![consolidation(&[(0, &[1, 2])], Scheduler::Kubernetes)];
    let mig = |freed| MigCandidate {
        gpus_freed: freed,
        workloads: vec![("GPU-0".into(), "a".into()), ("GPU-1".into(), "b".into())],
        evidence: "layouts".into(),
    };
    // MIG frees 1, consolidation 2: consolidation.
    let a = recommend(&findings, Some(&mig(1)), &ctx(&src));
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].kind, "consolidate");
    assert!(a[0].overruled.iter().all(|o| o.candidate == "mig_layout"));
    assert_eq!(a[0].overruled.len(), 2);
    // A tie goes to MIG (as the report's MIG section says).
    let a = recommend(&findings, Some(&mig(2)), &ctx(&src));
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].kind, "mig_layout");
    assert_eq!(a[0].steps.len(), 3);
    assert!(a[0].overruled.iter().any(|o| o.candidate == "consolidate"));
    // A plan that frees nothing is no action.
    assert!(recommend(&[], Some(&mig(0)), &ctx(&src)).is_empty());
}

#[test]
fn slurm_and_unattributed_workloads_get_advice_never_a_kubernetes_command() {
    let src = vec!["history:/h".to_string()];
    let findings = vec![
        idle(1, 1.0, None, Some("81234")),
        idle(2, 1.0, None, None),
        idle(3, 0.3, Some("nb"), None),
        consolidation(&[(4, &[5])], Scheduler::Slurm),
    ];
    let a = recommend(&findings, None, &ctx(&src));
    keys(&a);
    let by = |g: &str| {
        a.iter()
            .find(|a| a.workloads.iter().any(|w| w.key == g))
            .unwrap()
    };
    let slurm = by("GPU-1");
    assert!(slurm.steps.is_empty());
    assert!(slurm.advice.as_deref().unwrap().contains("scancel 81234"));
    assert!(by("GPU-2").steps.is_empty() && by("GPU-2").advice.is_some());
    assert_eq!(by("GPU-3").kind, "scale_idle_spans");
    assert_eq!(by("GPU-3").steps.len(), 1);
    // A consolidation of Slurm-held GPUs: the plan and its replay, no `share apply`.
    let c = by("GPU-4");
    assert!(c.steps.iter().all(|s| !s.command.contains("share apply")));
    assert!(c.advice.as_deref().unwrap().contains("gres/shard"));
}

#[test]
fn without_a_period_or_hours_nothing_is_an_impossible_number() {
    let src = Vec::new();
    let findings = vec![idle(1, 1.0, Some("a"), None)];
    let a = recommend(
        &findings,
        None,
        &ActionContext {
            sources: &src,
            period_hours: 0.0,
            prices: None,
            range: &[],
        },
    );
    assert_eq!(a[0].gpu_hours_per_month, 0.0);
    assert!(a[0].saving_per_month.is_none());
}

#[test]
fn every_detector_of_the_registry_is_placed() {
    // A new detector reaches the actions (a candidate) or is said to be fleet advice.
    for d in crate::advisor::registry() {
        let id = d.id();
        let n = usize::from(CANDIDATE_DETECTORS.contains(&id))
            + usize::from(ADVICE_DETECTORS.contains(&id));
        assert_eq!(n, 1, "detector {id} is in {n} of the actions' lists");
    }
    assert_eq!(
        CANDIDATE_DETECTORS.len() + ADVICE_DETECTORS.len(),
        crate::advisor::registry().len()
    );
}
