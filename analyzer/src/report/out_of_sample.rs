//! The report's out-of-sample check (`tessera report --out-of-sample`, docs/report.md): for its
//! own kinds of plan (consolidation moves, MIG layouts), a plan made from the previous period
//! and replayed on the reported one (`tessera replay`'s model, docs/replay.md) — "planned from
//! Nov 9–16, replayed on Nov 16–23: safe, 0 failed intervals, p99 memory 81% of the instance".
//!
//! This module sets the plan actions' verdicts from the checks (their text section is
//! `render`'s); the checks' figures ([`OutOfSample`]), making the plans and replaying them are
//! `crate::replay::train`'s, which [`super::run`] calls (out of sample only when asked,
//! [`super::Replays::OutOfSample`], so the default report costs nothing more).

pub use crate::replay::train::OutOfSample;

/// Sets the verdict of each plan action (`consolidate`, `mig_layout`) from the replay of its
/// kind on the reported period: of the plan the report made from it (the default:
/// `crate::replay::train::in_sample`), or of one made from the previous period
/// (`--out-of-sample`). An action whose kind was not replayed keeps its verdict.
pub fn verdicts_from_replays(actions: &mut [crate::actions::Action], checks: &[OutOfSample]) {
    for a in actions.iter_mut() {
        let kind = match a.kind {
            "consolidate" => "consolidation",
            "mig_layout" => "mig",
            _ => continue,
        };
        let Some(c) = checks.iter().find(|c| c.kind == kind) else {
            continue;
        };
        let (on, planned) =
            if (&c.trained_from, &c.trained_until) == (&c.replayed_from, &c.replayed_until) {
                ("on the period", "it was planned from")
            } else {
                ("on the reported period", "planned from the one before it")
            };
        a.verdict = match (c.verdict, &c.skipped) {
            (Some(v), _) => format!(
                "{v} {on} ({} .. {}), {planned}: {} failed interval(s){}",
                c.replayed_from,
                c.replayed_until,
                c.failed_intervals.unwrap_or(0),
                c.deciding
                    .first()
                    .map_or(String::new(), |d| format!("; deciding: {d}"))
            ),
            (None, Some(why)) => format!("not replayed: {why}"),
            (None, None) => continue,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actions::Action;

    fn action(kind: &'static str) -> Action {
        Action {
            rank: 1,
            kind,
            what: String::new(),
            workloads: Vec::new(),
            gpus_freed: Some(1),
            gpu_hours_per_month: 730.0,
            saving_per_month: None,
            currency: None,
            evidence: String::new(),
            verdict: "not replayed".into(),
            steps: Vec::new(),
            advice: None,
            done_by: String::new(),
            owner: None,
            teams: Vec::new(),
            findings: Vec::new(),
            overruled: Vec::new(),
            work: Vec::new(),
        }
    }

    fn check(kind: &'static str, verdict: Option<&'static str>) -> OutOfSample {
        OutOfSample {
            kind,
            trained_from: "a".into(),
            trained_until: "b".into(),
            replayed_from: "b".into(),
            replayed_until: "c".into(),
            skipped: verdict.is_none().then(|| "no rows".to_string()),
            verdict,
            failed_intervals: verdict.map(|_| 2),
            gpus_before: None,
            gpus_after: None,
            gpu_hours_freed: None,
            p99_memory_share_max: None,
            deciding: vec!["lab-a/GPU0 memory".into()],
        }
    }

    #[test]
    fn plan_actions_take_the_verdict_of_their_kinds_replay() {
        let mut a = vec![
            action("mig_layout"),
            action("consolidate"),
            action("scale_to_zero"),
        ];
        verdicts_from_replays(
            &mut a,
            &[check("mig", Some("tight")), check("consolidation", None)],
        );
        assert!(
            a[0].verdict
                .starts_with("tight on the reported period (b .. c)"),
            "{}",
            a[0].verdict
        );
        assert!(
            a[0].verdict
                .contains("2 failed interval(s); deciding: lab-a/GPU0 memory")
        );
        assert_eq!(a[1].verdict, "not replayed: no rows");
        assert_eq!(a[2].verdict, "not replayed");
    }
}
