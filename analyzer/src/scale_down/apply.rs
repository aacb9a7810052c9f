//! `--yes` and `--undo`: the writes, one workload at a time, each whole or not at all.
//!
//! Scale down, a Deployment or StatefulSet: read it again (the signs of [`super::plan`] that live
//! on the object — opt-out, GitOps — are checked again, so is an autoscaler that targets it
//! now, and one already at zero is skipped);
//! write the annotations [`FROM_ANNOTATION`] (the replicas read) and [`AT_ANNOTATION`] with a
//! JSON merge patch carrying the resourceVersion read (a 409 — someone changed it meanwhile —
//! reads it again and retries once); then set the replicas to 0 through the `scale`
//! subresource. When the scale fails, the annotations are removed again; when that fails too,
//! the exact `kubectl` command is reported. The order means a failure never leaves a workload
//! scaled without its record; at worst a record on a workload still at its count, which `--undo`
//! treats correctly (it removes the record and leaves the count). An InferenceService gets one
//! merge patch: the annotations and `spec.predictor.minReplicas: 0` together (KServe's
//! controller reverts changes to its Deployment).
//!
//! Undo: every workload with [`FROM_ANNOTATION`] (in one namespace or all): at zero, scaled back
//! to the recorded count (`scale`), then the annotations removed; not at zero (someone scaled
//! it since), the count is left as it is and only the annotations are removed. An
//! InferenceService gets one patch (`minReplicas` back, or removed when it was not set).
//!
//! The first failure stops the run: later workloads are not touched and are listed. What it does
//! not do: wait for pods to go or come back.

use serde_json::{Value, json};

use super::plan::{Plan, autoscaler, gitops_sign, opt_out};
use super::{AT_ANNOTATION, ApiError, FROM_ANNOTATION, Kind, Object, UNSET, Workloads};

/// What happened.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// One line per workload changed.
    pub done: Vec<String>,
    /// Workloads not changed because something else came first (a refusal found on the
    /// second read, a count already at zero).
    pub skipped: Vec<String>,
    /// The failure that stopped the run: the workload and the error (nothing of it changed,
    /// or `left` says what to run).
    pub failed: Option<(String, String)>,
    /// Workloads not tried after the failure.
    pub not_tried: Vec<String>,
    /// `kubectl` commands that finish what could not be put back.
    pub left: Vec<String>,
}

impl Outcome {
    /// 0 done, 2 a failure with everything of the failed workload as it was, 3 something to
    /// finish by hand (`left`).
    pub fn exit_code(&self) -> u8 {
        if !self.left.is_empty() {
            3
        } else if self.failed.is_some() {
            2
        } else {
            0
        }
    }
}

fn annotations(from: Option<&str>, at: Option<&str>) -> Value {
    json!({ FROM_ANNOTATION: from, AT_ANNOTATION: at })
}

fn remove_cmd(w: &Object) -> String {
    format!(
        "kubectl -n {} annotate {} {} {FROM_ANNOTATION}- {AT_ANNOTATION}-",
        w.namespace,
        w.kind.resource(),
        w.name
    )
}

/// Reads `w` again; `None` when it is gone.
fn reread(cluster: &mut dyn Workloads, w: &Object) -> Result<Object, ApiError> {
    cluster
        .get(w.kind, &w.namespace, &w.name)?
        .ok_or_else(|| ApiError::NotFound(format!("{} is gone", w.label())))
}

/// A merge patch with the resourceVersion of `fresh` as precondition: `make` builds it from
/// the object; a 409 reads the object again and retries once (`check` may refuse then).
fn patch_once_more(
    cluster: &mut dyn Workloads,
    mut fresh: Object,
    make: &dyn Fn(&Object) -> Option<Value>,
) -> Result<Option<Object>, ApiError> {
    for attempt in 0..2 {
        let Some(mut patch) = make(&fresh) else {
            return Ok(None);
        };
        patch["metadata"]["resourceVersion"] = json!(fresh.resource_version);
        match cluster.patch(fresh.kind, &fresh.namespace, &fresh.name, &patch) {
            Err(ApiError::Conflict(m)) if attempt == 0 => {
                eprintln!("tessera: {}: {m}; reading it again", fresh.label());
                fresh = reread(cluster, &fresh)?;
            }
            r => return r.map(Some),
        }
    }
    unreachable!("the loop returns on its second attempt")
}

/// Scale one workload down; `Ok(false)`: skipped (with the reason in `out.skipped`).
fn down_one(
    cluster: &mut dyn Workloads,
    planned: &Object,
    at: &str,
    out: &mut Outcome,
) -> Result<(), ApiError> {
    let fresh = reread(cluster, planned)?;
    let skip = |o: &Object| -> Option<String> {
        opt_out(o)
            .or_else(|| gitops_sign(o))
            .or_else(|| (o.replicas == Some(0)).then(|| "at zero already".to_string()))
    };
    if let Some(why) = skip(&fresh) {
        out.skipped.push(format!("{}: {why}", fresh.label()));
        return Ok(());
    }
    // An HPA or ScaledObject made since the plan owns the replicas now.
    if let Some(why) = autoscaler(&cluster.scale_targets(&fresh.namespace)?, &fresh) {
        out.skipped
            .push(format!("{}: {why} (since the plan)", fresh.label()));
        return Ok(());
    }
    if fresh.kind == Kind::InferenceService {
        let written = patch_once_more(cluster, fresh, &|o| {
            if skip(o).is_some() {
                return None;
            }
            let from = o.replicas.map_or(UNSET.to_string(), |n| n.to_string());
            Some(json!({
                "metadata": { "annotations": annotations(Some(&from), Some(at)) },
                "spec": { "predictor": { "minReplicas": 0 } },
            }))
        })?;
        match written {
            Some(w) => out.done.push(format!(
                "{}: minReplicas {} -> 0",
                w.label(),
                w.annotations
                    .get(FROM_ANNOTATION)
                    .map_or("?", String::as_str)
            )),
            None => out
                .skipped
                .push(format!("{}: changed meanwhile", planned.label())),
        }
        return Ok(());
    }
    let annotated = patch_once_more(cluster, fresh, &|o| {
        if skip(o).is_some() {
            return None;
        }
        let from = o.replicas.unwrap_or(1).to_string();
        Some(json!({ "metadata": { "annotations": annotations(Some(&from), Some(at)) } }))
    })?;
    let Some(w) = annotated else {
        out.skipped
            .push(format!("{}: changed meanwhile", planned.label()));
        return Ok(());
    };
    if let Err(e) = cluster.scale(w.kind, &w.namespace, &w.name, 0) {
        let undo = json!({ "metadata": { "annotations": annotations(None, None) } });
        if let Err(e2) = cluster.patch(w.kind, &w.namespace, &w.name, &undo) {
            eprintln!(
                "tessera: {}: the annotation could not be removed after the failed scale: {e2}",
                w.label()
            );
            out.left.push(remove_cmd(&w));
        }
        return Err(e);
    }
    out.done.push(format!(
        "{}: replicas {} -> 0",
        w.label(),
        w.replicas.unwrap_or(1)
    ));
    Ok(())
}

/// `--yes`: the plan's actions, in order, until the first failure.
pub fn scale_down(cluster: &mut dyn Workloads, plan: &Plan, at: &str) -> Outcome {
    let mut out = Outcome::default();
    let mut actions = plan.actions.iter();
    for a in actions.by_ref() {
        if let Err(e) = down_one(cluster, &a.workload, at, &mut out) {
            out.failed = Some((a.workload.label(), e.to_string()));
            break;
        }
    }
    out.not_tried = actions.map(|a| a.workload.label()).collect();
    out
}

/// Restore one workload tessera scaled down.
fn undo_one(cluster: &mut dyn Workloads, w: &Object, out: &mut Outcome) -> Result<(), ApiError> {
    let recorded = w
        .annotations
        .get(FROM_ANNOTATION)
        .cloned()
        .unwrap_or_default();
    let count: Option<i64> = match recorded.as_str() {
        UNSET if w.kind == Kind::InferenceService => None,
        v => match v.parse::<i64>() {
            Ok(n) if n > 0 => Some(n),
            _ => {
                out.skipped.push(format!(
                    "{}: {FROM_ANNOTATION}={:?} is not a replica count; left as it is",
                    w.label(),
                    crate::text::printable(v)
                ));
                return Ok(());
            }
        },
    };
    let shown = count.map_or(format!("{UNSET} (1)"), |n| n.to_string());
    if w.kind == Kind::InferenceService {
        let written = patch_once_more(cluster, w.clone(), &|o| {
            o.annotations.get(FROM_ANNOTATION)?;
            let mut p = json!({ "metadata": { "annotations": annotations(None, None) } });
            if o.replicas == Some(0) {
                p["spec"] = json!({ "predictor": { "minReplicas": count } });
            }
            Some(p)
        })?;
        if written.is_some() {
            out.done.push(if w.replicas == Some(0) {
                format!("{}: minReplicas 0 -> {shown}", w.label())
            } else {
                format!(
                    "{}: minReplicas is {} (changed since tessera scaled it down): left as it is, record removed",
                    w.label(),
                    w.replicas.map_or("unset".into(), |n| n.to_string())
                )
            });
        }
        return Ok(());
    }
    let now = w.replicas.unwrap_or(1);
    if now == 0 {
        cluster.scale(w.kind, &w.namespace, &w.name, count.unwrap_or(1))?;
    }
    let remove = json!({ "metadata": { "annotations": annotations(None, None) } });
    if let Err(e) = cluster.patch(w.kind, &w.namespace, &w.name, &remove) {
        if now == 0 {
            // Restored, record left: the next --undo sees the count and removes it.
            out.left.push(remove_cmd(w));
        }
        return Err(e);
    }
    out.done.push(if now == 0 {
        format!("{}: replicas 0 -> {shown}", w.label())
    } else {
        format!(
            "{}: replicas is {now} (changed since tessera scaled it down): left as it is, record removed",
            w.label()
        )
    });
    Ok(())
}

/// The workloads tessera scaled down (by [`FROM_ANNOTATION`]), in `namespace` or all.
pub fn scaled(
    cluster: &mut dyn Workloads,
    namespace: Option<&str>,
) -> Result<Vec<Object>, ApiError> {
    let mut out = Vec::new();
    for kind in [Kind::Deployment, Kind::StatefulSet, Kind::InferenceService] {
        let list = match cluster.list(kind, namespace) {
            // No KServe in the cluster: no InferenceService to restore.
            Err(ApiError::NotFound(_)) if kind == Kind::InferenceService => Vec::new(),
            r => r?,
        };
        out.extend(
            list.into_iter()
                .filter(|o| o.annotations.contains_key(FROM_ANNOTATION)),
        );
    }
    Ok(out)
}

/// `--undo --yes`: restore `workloads` (from [`scaled`]), until the first failure.
pub fn undo(cluster: &mut dyn Workloads, workloads: &[Object]) -> Outcome {
    let mut out = Outcome::default();
    let mut rest = workloads.iter();
    for w in rest.by_ref() {
        if let Err(e) = undo_one(cluster, w, &mut out) {
            out.failed = Some((w.label(), e.to_string()));
            break;
        }
    }
    out.not_tried = rest.map(Object::label).collect();
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::scale_down::ScaleTarget;
    use crate::scale_down::plan::Action;

    /// One Deployment; an HPA targeting it appears after the plan was made.
    struct Cluster {
        deployment: Object,
        hpa: bool,
        writes: usize,
    }

    impl Workloads for Cluster {
        fn get(&mut self, _: Kind, _: &str, _: &str) -> Result<Option<Object>, ApiError> {
            Ok(Some(self.deployment.clone()))
        }
        fn list(&mut self, _: Kind, _: Option<&str>) -> Result<Vec<Object>, ApiError> {
            Ok(vec![self.deployment.clone()])
        }
        fn scale_targets(&mut self, _: &str) -> Result<Vec<ScaleTarget>, ApiError> {
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
        fn patch(&mut self, _: Kind, _: &str, _: &str, _: &Value) -> Result<Object, ApiError> {
            self.writes += 1;
            Ok(self.deployment.clone())
        }
        fn scale(&mut self, _: Kind, _: &str, _: &str, _: i64) -> Result<(), ApiError> {
            self.writes += 1;
            Ok(())
        }
    }

    #[test]
    fn an_autoscaler_made_after_the_plan_stops_the_write() {
        let deployment = Object {
            kind: Kind::Deployment,
            namespace: "ml".into(),
            name: "web".into(),
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            owners: Vec::new(),
            replicas: Some(2),
            resource_version: "7".into(),
            phase: None,
        };
        let plan = Plan {
            actions: vec![Action {
                workload: deployment.clone(),
                pods: vec!["web-1".into()],
                idle_since_ms: 0,
            }],
            ..Plan::default()
        };
        let mut c = Cluster {
            deployment,
            hpa: true,
            writes: 0,
        };
        let out = scale_down(&mut c, &plan, "2026-11-27T00:00:00Z");
        assert_eq!(c.writes, 0, "{out:?}");
        assert!(out.done.is_empty());
        assert_eq!(
            out.skipped,
            [
                "deployment ml/web: targeted by HorizontalPodAutoscaler ml/web (spec.scaleTargetRef): it owns the replicas (since the plan)"
            ]
        );
        // Without it, the same plan writes the record and scales.
        c.hpa = false;
        let out = scale_down(&mut c, &plan, "2026-11-27T00:00:00Z");
        assert_eq!((c.writes, out.done.len()), (2, 1), "{out:?}");
    }
}
