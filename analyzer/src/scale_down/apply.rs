//! `--yes`: the writes, one workload at a time, each whole or not at all, each on the state it
//! was decided on (`--undo` is [`super::undo`]).
//!
//! Before each workload: the evidence must still be fresh by the clock ([`Context::fresh`]);
//! the workload is read again and must still have the count the plan was made on (a workload
//! that grew since the plan is not scaled: compare-and-swap on the count), its running pods
//! are listed again and each must be one the evidence shows idle now (a pod added since has no
//! evidence), and the signs of [`super::plan`] are checked again (opt-out, GitOps, an
//! autoscaler that targets it now; one already at zero is skipped). Then the journal entry is
//! written ([`super::journal`]), then the annotations [`FROM_ANNOTATION`] (the count decided
//! on) and [`AT_ANNOTATION`] by a JSON merge patch carrying the resourceVersion read (a 409 —
//! someone changed it meanwhile — reads it again and retries once, if the count is still the
//! one decided on), then `replicas: 0` through the `scale` subresource carrying the
//! resourceVersion of the annotated object (compare-and-swap: refused by the API server when
//! anything changed in between).
//!
//! A scale that fails is read back before anything else: a timeout or a transport error does not
//! say whether it was applied. Read back at zero, it was applied (the answer was lost): the
//! record stays, it counts as done, and the commands that undo it are printed. Read back not at
//! zero, the annotations are removed by a patch carrying the resourceVersion read back: once
//! that is written, the lost scale can no longer land (its resourceVersion is stale), and the
//! workload is as it was. When the object cannot be read back, nothing is removed (the scale may
//! still land, and then the record is needed) and the commands are printed (exit 3). A 409,
//! 404 or 403 on the scale was certainly not applied: the annotations are removed. An
//! InferenceService gets one merge patch, annotations and `minReplicas: 0` together (KServe's
//! controller reverts changes to its Deployment), so a late one lands with its record.
//!
//! The first failure stops the run: later workloads are not touched and are listed. What it does
//! not do: read the telemetry again (the evidence's age is checked against the clock instead),
//! or wait for pods to go.

use serde_json::{Value, json};

use super::idle::IdleSet;
use super::journal::{Entry, Journal};
use super::plan::{Action, Plan, autoscaler, gitops_sign, opt_out, running_pods};
use super::{AT_ANNOTATION, FROM_ANNOTATION, Kind, KubeError, Object, UNSET, Workloads};
use crate::kubernetes::configmap::retry_on_conflict;
use crate::kubernetes::events;

/// What happened.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// One line per workload changed.
    pub done: Vec<String>,
    /// Workloads not changed because something else came first (a refusal found on the
    /// second read, a count already at zero, a workload changed since the plan).
    pub skipped: Vec<String>,
    /// Records `--undo` refused (not a count, or outside the workload's recorded history):
    /// left as they are; the run went on with the others.
    pub refused: Vec<String>,
    /// Things to know with the commands that go with them (a write whose answer was lost but
    /// that was applied).
    pub notes: Vec<String>,
    /// The failure that stopped the run: the workload and the error (nothing of it changed,
    /// or `left` says what to run).
    pub failed: Option<(String, String)>,
    /// Workloads not tried after the failure.
    pub not_tried: Vec<String>,
    /// `kubectl` commands that finish what could not be put back, or check what is unknown.
    pub left: Vec<String>,
}

impl Outcome {
    /// 0 done, 2 a failure with everything of the failed workload as it was or a refused
    /// record, 3 something to finish by hand (`left`).
    pub fn exit_code(&self) -> u8 {
        if !self.left.is_empty() {
            3
        } else if self.failed.is_some() || !self.refused.is_empty() {
            2
        } else {
            0
        }
    }
}

/// What the writes of `--yes` check against, and where they record.
pub struct Context<'a> {
    /// The time written into [`AT_ANNOTATION`] (RFC 3339 UTC).
    pub at: &'a str,
    /// The evidence: the pods idle now.
    pub idle: &'a IdleSet,
    /// The freshness rule against the clock, asked right before each workload's writes
    /// (`Err`: why the evidence is too old now).
    pub fresh: &'a dyn Fn() -> Result<(), String>,
    /// The local journal.
    pub journal: &'a mut Journal,
}

pub(super) fn annotations(from: Option<&str>, at: Option<&str>) -> Value {
    json!({ FROM_ANNOTATION: from, AT_ANNOTATION: at })
}

pub(super) fn remove_cmd(w: &Object) -> String {
    format!(
        "kubectl -n {} annotate {} {} {FROM_ANNOTATION}- {AT_ANNOTATION}-",
        w.namespace,
        w.kind.resource(),
        w.name
    )
}

fn scale_cmd(w: &Object, to: &str) -> String {
    format!(
        "kubectl -n {} scale {}/{} --replicas={to}",
        w.namespace,
        w.kind.resource(),
        w.name
    )
}

/// Reads `w` again; [`KubeError::NotFound`] when it is gone.
pub(super) fn reread(cluster: &mut dyn Workloads, w: &Object) -> Result<Object, KubeError> {
    cluster
        .get(w.kind, &w.namespace, &w.name)?
        .ok_or_else(|| KubeError::NotFound(format!("{} is gone", w.label())))
}

/// A merge patch with the resourceVersion of `fresh` as precondition: `make` builds it from
/// the object; a 409 reads the object again and retries once (`make` may refuse then).
pub(super) fn patch_once_more(
    cluster: &mut dyn Workloads,
    mut fresh: Object,
    make: &dyn Fn(&Object) -> Option<Value>,
) -> Result<Option<Object>, KubeError> {
    let what = fresh.label();
    retry_on_conflict(&what, 2, &mut std::io::stderr(), |again| {
        if again {
            fresh = reread(cluster, &fresh)?;
        }
        let Some(mut patch) = make(&fresh) else {
            return Ok(None);
        };
        patch["metadata"]["resourceVersion"] = json!(fresh.resource_version);
        cluster
            .patch(fresh.kind, &fresh.namespace, &fresh.name, &patch)
            .map(Some)
    })
}

fn count(n: Option<i64>) -> String {
    n.map_or(UNSET.to_string(), |n| n.to_string())
}

/// Why `fresh` must not be scaled now that it is read again, if anything.
fn changed_since_plan(
    cluster: &mut dyn Workloads,
    a: &Action,
    fresh: &Object,
    idle: &IdleSet,
) -> Result<Option<String>, KubeError> {
    if !a.workload.uid.is_empty() && fresh.uid != a.workload.uid {
        return Ok(Some(
            "deleted and made again since the plan (another uid): not scaled; run tessera scale-down again"
                .into(),
        ));
    }
    if fresh.replicas != a.workload.replicas {
        return Ok(Some(format!(
            "changed since the plan: {} {} -> {} (the plan was made on {}): not scaled; run tessera scale-down again",
            if fresh.kind == Kind::InferenceService {
                "minReplicas"
            } else {
                "replicas"
            },
            count(a.workload.replicas),
            count(fresh.replicas),
            count(a.workload.replicas),
        )));
    }
    if let Some(why) = opt_out(fresh)
        .or_else(|| gitops_sign(fresh))
        .or_else(|| (fresh.replicas == Some(0)).then(|| "at zero already".to_string()))
    {
        return Ok(Some(why));
    }
    let pods = running_pods(cluster, &fresh.namespace, fresh.kind, &fresh.name)?;
    let not_idle: Vec<&String> = pods
        .iter()
        .filter(|p| {
            !idle
                .idle
                .contains_key(&(fresh.namespace.clone(), (*p).clone()))
        })
        .collect();
    if !not_idle.is_empty() {
        return Ok(Some(format!(
            "pods read again right before the write: {} not idle now by the evidence (running since the plan, or busy): not scaled",
            not_idle
                .iter()
                .map(|p| p.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    Ok(None)
}

/// Whether `o` still has the replica count decided on, with no opt-out and no GitOps sign: only
/// then is it written.
fn still_as_planned(o: &Object, decided: Option<i64>) -> bool {
    o.replicas == decided && opt_out(o).is_none() && gitops_sign(o).is_none()
}

/// Scales a KServe InferenceService to zero through its `minReplicas` (with tessera's
/// annotations, in one patch); its journal entry is taken back when the patch surely did not
/// apply.
fn scale_down_isvc(
    cluster: &mut dyn Workloads,
    fresh: &Object,
    from: &str,
    decided: Option<i64>,
    ctx: &mut Context<'_>,
    out: &mut Outcome,
) -> Result<(), KubeError> {
    let unchanged = |o: &Object| still_as_planned(o, decided);
    let at = ctx.at;
    let label = fresh.label();
    let written = patch_once_more(cluster, fresh.clone(), &|o| {
        unchanged(o).then(|| {
            json!({
                "metadata": { "annotations": annotations(Some(from), Some(at)) },
                "spec": { "predictor": { "minReplicas": 0 } },
            })
        })
    });
    match written {
        Ok(Some(_)) => {
            out.done.push(format!("{label}: minReplicas {from} -> 0"));
            Ok(())
        }
        Ok(None) => {
            forget(ctx.journal, fresh);
            out.skipped
                .push(format!("{label}: changed since the plan: not scaled"));
            Ok(())
        }
        Err(e) if e.certainly_not_applied() => {
            forget(ctx.journal, fresh);
            Err(e)
        }
        Err(e) => isvc_unanswered(cluster, fresh, at, e, out),
    }
}

/// Scale one workload down.
fn down_one(
    cluster: &mut dyn Workloads,
    a: &Action,
    ctx: &mut Context<'_>,
    out: &mut Outcome,
) -> Result<(), KubeError> {
    (ctx.fresh)().map_err(KubeError::Other)?;
    let planned = &a.workload;
    let fresh = reread(cluster, planned)?;
    if let Some(why) = changed_since_plan(cluster, a, &fresh, ctx.idle)? {
        out.skipped.push(format!("{}: {why}", fresh.label()));
        return Ok(());
    }
    // An HPA or ScaledObject made since the plan owns the replicas now.
    if let Some(why) = autoscaler(&cluster.scale_targets(&fresh.namespace)?, &fresh) {
        out.skipped
            .push(format!("{}: {why} (since the plan)", fresh.label()));
        return Ok(());
    }
    let from = match fresh.kind {
        Kind::InferenceService => count(fresh.replicas),
        _ => fresh.replicas.unwrap_or(1).to_string(),
    };
    ctx.journal
        .record(Entry {
            kind: fresh.kind.kind().into(),
            namespace: fresh.namespace.clone(),
            name: fresh.name.clone(),
            uid: fresh.uid.clone(),
            from: from.clone(),
            at: ctx.at.into(),
        })
        .map_err(|e| KubeError::Other(format!("{}: nothing written: {e}", fresh.label())))?;
    // On a 409 the object is read again: written only if it still has the count decided on.
    let decided = planned.replicas;
    let unchanged = |o: &Object| still_as_planned(o, decided);
    let at = ctx.at;
    if fresh.kind == Kind::InferenceService {
        return scale_down_isvc(cluster, &fresh, &from, decided, ctx, out);
    }
    let annotated = match patch_once_more(cluster, fresh.clone(), &|o| {
        unchanged(o)
            .then(|| json!({ "metadata": { "annotations": annotations(Some(&from), Some(at)) } }))
    }) {
        Ok(Some(w)) => w,
        Ok(None) => {
            forget(ctx.journal, &fresh);
            out.skipped.push(format!(
                "{}: changed since the plan: not scaled",
                planned.label()
            ));
            return Ok(());
        }
        Err(e) if e.certainly_not_applied() => {
            forget(ctx.journal, &fresh);
            return Err(e);
        }
        Err(e) => return Err(unanswered_record(cluster, &fresh, at, e, ctx.journal, out)),
    };
    let e = match cluster.scale(
        annotated.kind,
        &annotated.namespace,
        &annotated.name,
        0,
        &annotated.resource_version,
    ) {
        Ok(_) => {
            out.done
                .push(format!("{}: replicas {from} -> 0", annotated.label()));
            return Ok(());
        }
        Err(e) => e,
    };
    if e.certainly_not_applied() {
        take_record_back(cluster, &annotated, None, ctx.journal, out);
        return Err(e);
    }
    unanswered_scale(cluster, &annotated, &from, e, ctx.journal, out)
}

fn forget(journal: &mut Journal, w: &Object) {
    if let Err(e) = journal.forget(w.kind, &w.namespace, &w.name) {
        eprintln!("tessera: {e}");
    }
}

/// Removes tessera's annotations from `w` (only if it is still at `precondition`, when given)
/// and, once the object is read back without them, its journal entry. Whatever cannot be
/// removed is left as a command.
fn take_record_back(
    cluster: &mut dyn Workloads,
    w: &Object,
    precondition: Option<&str>,
    journal: &mut Journal,
    out: &mut Outcome,
) -> bool {
    let mut undo = json!({ "metadata": { "annotations": annotations(None, None) } });
    if let Some(rv) = precondition {
        undo["metadata"]["resourceVersion"] = json!(rv);
    }
    match cluster.patch(w.kind, &w.namespace, &w.name, &undo) {
        Ok(back) if !back.annotations.contains_key(FROM_ANNOTATION) => {
            forget(journal, w);
            true
        }
        Ok(_) => {
            out.left.push(remove_cmd(w));
            false
        }
        Err(e2) => {
            eprintln!(
                "tessera: {}: the annotation could not be removed after the failed scale: {e2}",
                w.label()
            );
            if !matches!(e2, KubeError::Conflict(_)) {
                out.left.push(remove_cmd(w));
            }
            false
        }
    }
}

/// The annotation patch of `w` failed without saying whether it was applied (`e`): read it
/// back; a record that landed (on a workload still at its count) is taken back.
fn unanswered_record(
    cluster: &mut dyn Workloads,
    w: &Object,
    at: &str,
    e: KubeError,
    journal: &mut Journal,
    out: &mut Outcome,
) -> KubeError {
    match reread(cluster, w) {
        Ok(back) if back.annotations.get(AT_ANNOTATION).map(String::as_str) == Some(at) => {
            if take_record_back(cluster, &back, Some(&back.resource_version), journal, out) {
                KubeError::Other(format!(
                    "{e} (read back: the record had landed; taken back)"
                ))
            } else {
                if !out.left.contains(&remove_cmd(w)) {
                    out.left.push(remove_cmd(w));
                }
                e
            }
        }
        Ok(_) => KubeError::Other(format!(
            "{e} (read back: not applied; should it land later, it is a record on a workload at its count, which --undo removes)"
        )),
        Err(_) => {
            out.left.push(remove_cmd(w));
            e
        }
    }
}

/// The scale of `w` failed without saying whether it was applied (`e`): read it back.
fn unanswered_scale(
    cluster: &mut dyn Workloads,
    w: &Object,
    from: &str,
    e: KubeError,
    journal: &mut Journal,
    out: &mut Outcome,
) -> Result<(), KubeError> {
    let label = w.label();
    let applied = |out: &mut Outcome| {
        out.done.push(format!(
            "{label}: replicas {from} -> 0 (the answer was lost, {e}; read back as applied)"
        ));
        out.notes.push(format!(
            "{label}: the scale to 0 was applied although its answer was lost; the record stays on it, and `tessera scale-down --undo --yes --namespace {ns}` restores it (or by hand: {scale} && {remove})",
            ns = w.namespace,
            scale = scale_cmd(w, from),
            remove = remove_cmd(w),
        ));
    };
    for _ in 0..2 {
        let back = match reread(cluster, w) {
            Ok(b) => b,
            Err(e2) => {
                out.left.push(format!(
                    "kubectl -n {} get {} {} -o jsonpath='{{.spec.replicas}}'   # the scale to 0 may have been applied ({e}) and tessera could not read it back ({e2}): at 0, `tessera scale-down --undo --yes --namespace {}` restores it; otherwise: {}",
                    w.namespace,
                    w.kind.resource(),
                    w.name,
                    w.namespace,
                    remove_cmd(w)
                ));
                return Err(e);
            }
        };
        if back.replicas == Some(0) {
            applied(out);
            return Ok(());
        }
        // Not applied (yet): removing the record with the version read back fences the lost
        // scale out (it carries an older version, so it can no longer land).
        let mut undo = json!({ "metadata": { "annotations": annotations(None, None) } });
        undo["metadata"]["resourceVersion"] = json!(back.resource_version);
        match cluster.patch(w.kind, &w.namespace, &w.name, &undo) {
            Ok(_) => {
                forget(journal, w);
                return Err(KubeError::Other(format!(
                    "{e} (read back: not applied, and it can no longer land)"
                )));
            }
            // Changed between the read and the removal: perhaps the scale landing; read again.
            Err(KubeError::Conflict(_)) => continue,
            Err(e2) => {
                eprintln!(
                    "tessera: {label}: the annotation could not be removed after the failed scale: {e2}"
                );
                out.left.push(remove_cmd(w));
                return Err(e);
            }
        }
    }
    out.left.push(format!(
        "kubectl -n {} get {} {} -o jsonpath='{{.spec.replicas}}'   # it keeps changing: at 0, `tessera scale-down --undo --yes --namespace {}` restores it; otherwise: {}",
        w.namespace,
        w.kind.resource(),
        w.name,
        w.namespace,
        remove_cmd(w)
    ));
    Err(e)
}

/// The one patch of an InferenceService failed without saying whether it was applied: read it
/// back. Record and `minReplicas` travel in one patch, so a late one lands with its record.
fn isvc_unanswered(
    cluster: &mut dyn Workloads,
    w: &Object,
    at: &str,
    e: KubeError,
    out: &mut Outcome,
) -> Result<(), KubeError> {
    match reread(cluster, w) {
        Ok(back)
            if back.replicas == Some(0)
                && back.annotations.get(AT_ANNOTATION).map(String::as_str) == Some(at) =>
        {
            out.done.push(format!(
                "{}: minReplicas {} -> 0 (the answer was lost, {e}; read back as applied)",
                w.label(),
                count(w.replicas)
            ));
            out.notes.push(format!(
                "{}: the patch was applied although its answer was lost; the record is on it: `tessera scale-down --undo --yes --namespace {}` restores it",
                w.label(),
                w.namespace
            ));
            Ok(())
        }
        _ => Err(KubeError::Other(format!(
            "{e} (not read back as applied; should it land later, it carries its record and `tessera scale-down --undo --yes --namespace {}` restores it)",
            w.namespace
        ))),
    }
}

/// The Kubernetes Event of each change made to `w` (`done`: what the outcome says was done);
/// an Event that cannot be written is a note, not a failure.
pub(super) fn audit(
    cluster: &mut dyn Workloads,
    w: &Object,
    reason: &str,
    done: &[String],
    notes: &mut Vec<String>,
) {
    for d in done {
        let change = events::Change {
            regarding: events::Regarding {
                api_version: w.kind.api_version().to_string(),
                kind: w.kind.kind().to_string(),
                namespace: Some(w.namespace.clone()),
                name: w.name.clone(),
                uid: (!w.uid.is_empty()).then(|| w.uid.clone()),
            },
            reason,
            action: "Scale",
            note: format!("tessera scale-down: {d}"),
            warning: false,
        };
        if let Err(e) = cluster.event(&change) {
            notes.push(format!(
                "warning: {}: the change was made, but its audit trail could not be written: {e}",
                w.label()
            ));
        }
    }
}

/// `--yes`: the plan's actions, in order, until the first failure.
pub fn scale_down(cluster: &mut dyn Workloads, plan: &Plan, mut ctx: Context<'_>) -> Outcome {
    let mut out = Outcome::default();
    let mut actions = plan.actions.iter();
    for a in actions.by_ref() {
        let done = out.done.len();
        let result = down_one(cluster, a, &mut ctx, &mut out);
        audit(
            cluster,
            &a.workload,
            "ScaledDown",
            &out.done[done..],
            &mut out.notes,
        );
        if let Err(e) = result {
            out.failed = Some((a.workload.label(), e.to_string()));
            break;
        }
    }
    out.not_tried = actions.map(|a| a.workload.label()).collect();
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::scale_down::idle::IdlePod;
    use crate::scale_down::plan::Action;
    use crate::scale_down::{OwnerRef, ScaleTarget, Scaled};

    /// One Deployment with one pod; an HPA targeting it appears after the plan was made.
    struct Cluster {
        deployment: Object,
        hpa: bool,
        writes: usize,
    }

    fn object(kind: Kind, name: &str, owner: Option<(&str, &str)>) -> Object {
        Object {
            kind,
            namespace: "ml".into(),
            name: name.into(),
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            owners: owner
                .map(|(kind, name)| OwnerRef {
                    api_version: "apps/v1".into(),
                    kind: kind.into(),
                    name: name.into(),
                    controller: true,
                })
                .into_iter()
                .collect(),
            replicas: (kind != Kind::Pod).then_some(2),
            resource_version: "7".into(),
            uid: format!("uid-{name}"),
            max_replicas: None,
            phase: None,
        }
    }

    impl Workloads for Cluster {
        fn get(&mut self, kind: Kind, _: &str, _: &str) -> Result<Option<Object>, KubeError> {
            Ok(Some(match kind {
                Kind::ReplicaSet => object(kind, "web-rs", Some(("Deployment", "web"))),
                _ => self.deployment.clone(),
            }))
        }
        fn list(&mut self, kind: Kind, _: Option<&str>) -> Result<Vec<Object>, KubeError> {
            Ok(match kind {
                Kind::Pod => vec![object(kind, "web-1", Some(("ReplicaSet", "web-rs")))],
                _ => vec![self.deployment.clone()],
            })
        }
        fn scale_targets(&mut self, _: &str) -> Result<Vec<ScaleTarget>, KubeError> {
            Ok(self
                .hpa
                .then(|| ScaleTarget {
                    source: "HorizontalPodAutoscaler ml/web".into(),
                    kind: "Deployment".into(),
                    name: "web".into(),
                })
                .into_iter()
                .collect())
        }
        fn patch(&mut self, _: Kind, _: &str, _: &str, _: &Value) -> Result<Object, KubeError> {
            self.writes += 1;
            Ok(self.deployment.clone())
        }
        fn scale(
            &mut self,
            _: Kind,
            _: &str,
            _: &str,
            replicas: i64,
            _: &str,
        ) -> Result<Scaled, KubeError> {
            self.writes += 1;
            Ok(Scaled {
                replicas,
                resource_version: "8".into(),
            })
        }
        fn event(&mut self, _: &crate::kubernetes::events::Change<'_>) -> Result<(), KubeError> {
            Ok(())
        }
    }

    #[test]
    fn an_autoscaler_made_after_the_plan_stops_the_write() {
        let deployment = object(Kind::Deployment, "web", None);
        let plan = Plan {
            actions: vec![Action {
                workload: deployment.clone(),
                pods: vec!["web-1".into()],
                idle_since_ms: 0,
            }],
            ..Plan::default()
        };
        let mut idle = IdleSet::default();
        idle.idle.insert(
            ("ml".into(), "web-1".into()),
            IdlePod {
                findings: vec!["f".into()],
                idle_since_ms: 0,
            },
        );
        let mut c = Cluster {
            deployment,
            hpa: true,
            writes: 0,
        };
        let mut journal = Journal::in_memory();
        let fresh = || Ok(());
        fn ctx<'a>(
            idle: &'a IdleSet,
            fresh: &'a dyn Fn() -> Result<(), String>,
            journal: &'a mut Journal,
        ) -> Context<'a> {
            Context {
                at: "2026-11-27T00:00:00Z",
                idle,
                fresh,
                journal,
            }
        }
        let out = scale_down(&mut c, &plan, ctx(&idle, &fresh, &mut journal));
        assert_eq!(c.writes, 0, "{out:?}");
        assert!(out.done.is_empty());
        assert_eq!(
            out.skipped,
            [
                "deployment ml/web: targeted by HorizontalPodAutoscaler ml/web (spec.scaleTargetRef): it owns the replicas (since the plan)"
            ]
        );
        assert!(journal.entries().is_empty());
        // Without it, the same plan writes the record and scales.
        c.hpa = false;
        let out = scale_down(&mut c, &plan, ctx(&idle, &fresh, &mut journal));
        assert_eq!((c.writes, out.done.len()), (2, 1), "{out:?}");
        assert_eq!(journal.entries().len(), 1);
        // Evidence gone stale by the clock stops the run before any write.
        let stale = || Err("the evidence is 2 h old".to_string());
        let writes = c.writes;
        let out = scale_down(
            &mut c,
            &plan,
            Context {
                at: "2026-11-27T00:00:00Z",
                idle: &idle,
                fresh: &stale,
                journal: &mut journal,
            },
        );
        assert_eq!(c.writes, writes);
        assert_eq!(
            out.failed,
            Some(("deployment ml/web".into(), "the evidence is 2 h old".into()))
        );
    }
}
