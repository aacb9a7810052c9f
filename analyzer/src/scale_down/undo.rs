//! `--undo`: the workloads tessera scaled down (by [`FROM_ANNOTATION`]) put back, each record
//! checked against the workload's recorded history first.
//!
//! The history: tessera's journal ([`super::journal`]) — a record whose count differs from the
//! journal's entry for the workload is refused; without an entry (the journal of another
//! machine), an InferenceService's `spec.predictor.maxReplicas` and `--undo.max-replicas`
//! bound it, and with neither the record is refused with the `kubectl` command that restores it
//! by hand. A record that is not a count is refused too. A refused record is left as it is,
//! reported, and the run goes on with the others (exit 2).
//!
//! Restore: at zero, scaled back to the recorded count through `scale` with the resourceVersion
//! read (refused when it changed since), then — once the count is read back (the scale's
//! answer, or the object read again after a write whose answer was lost) — the annotations and
//! the journal entry are removed; not at zero (someone scaled it since), the count is left as
//! it is and only the record is removed. An InferenceService gets one patch (`minReplicas`
//! back, or removed when it was not set). An API error stops the run: later workloads are not
//! touched and are listed.

use serde_json::json;

use super::apply::{Outcome, annotations, patch_once_more, remove_cmd, reread};
use super::journal::Journal;
use super::{FROM_ANNOTATION, Kind, KubeError, Object, UNSET, Workloads};
use crate::output::escape::printable;

/// The largest count the API takes (`spec.replicas` is an int32).
const MAX_REPLICAS: i64 = i32::MAX as i64;

/// The count a record restores (`None`: KServe's unset `minReplicas`), or why it is refused.
pub fn restorable(
    w: &Object,
    journal: &Journal,
    max_replicas: Option<i64>,
) -> Result<Option<i64>, String> {
    let recorded = w
        .annotations
        .get(FROM_ANNOTATION)
        .cloned()
        .unwrap_or_default();
    let count = match recorded.trim() {
        UNSET if w.kind == Kind::InferenceService => None,
        v => match v.parse::<i64>() {
            Ok(n) if (1..=MAX_REPLICAS).contains(&n) => Some(n),
            _ => {
                return Err(format!(
                    "{FROM_ANNOTATION}={:?} is not a replica count; left as it is",
                    printable(&recorded)
                ));
            }
        },
    };
    let by_hand = || match (w.kind, count) {
        (Kind::InferenceService, n) => format!(
            "kubectl -n {} patch inferenceservice {} --type merge -p '{{\"spec\":{{\"predictor\":{{\"minReplicas\":{}}}}}}}'",
            w.namespace,
            w.name,
            n.map_or("null".into(), |n| n.to_string())
        ),
        (k, n) => format!(
            "kubectl -n {} scale {}/{} --replicas={}",
            w.namespace,
            k.resource(),
            w.name,
            n.unwrap_or(1)
        ),
    };
    if let Some(e) = journal.find(w.kind, &w.namespace, &w.name)
        && (e.uid.is_empty() || w.uid.is_empty() || e.uid == w.uid)
    {
        return if e.from == recorded.trim() {
            Ok(count)
        } else {
            Err(format!(
                "{FROM_ANNOTATION}={:?} but tessera's journal recorded {} at {}: the record was changed since; left as it is (if {:?} is right: {})",
                printable(&recorded),
                e.from,
                e.at,
                printable(&recorded),
                by_hand()
            ))
        };
    }
    let n = count.unwrap_or(1);
    if let Some(max) = w.max_replicas
        && n > max
    {
        return Err(format!(
            "{FROM_ANNOTATION}={n} is above its maxReplicas {max}; left as it is"
        ));
    }
    if w.max_replicas.is_some() {
        return Ok(count);
    }
    match max_replicas {
        Some(max) if n <= max => Ok(count),
        Some(max) => Err(format!(
            "{FROM_ANNOTATION}={n} is above --undo.max-replicas {max} and tessera's journal has no entry for it; left as it is (if {n} is right: {})",
            by_hand()
        )),
        None => Err(format!(
            "{FROM_ANNOTATION}={n}: tessera's journal{} has no entry for it, so no recorded history bounds the count; left as it is (give --undo.max-replicas N to restore records up to N, or if {n} is right: {})",
            journal
                .path()
                .map(|p| format!(" ({})", p.display()))
                .unwrap_or_default(),
            by_hand()
        )),
    }
}

fn forget(journal: &mut Journal, w: &Object) {
    if let Err(e) = journal.forget(w.kind, &w.namespace, &w.name) {
        eprintln!("tessera: {e}");
    }
}

/// Restore one workload tessera scaled down.
fn undo_one(
    cluster: &mut dyn Workloads,
    w: &Object,
    journal: &mut Journal,
    max_replicas: Option<i64>,
    out: &mut Outcome,
) -> Result<(), KubeError> {
    let at_zero = w.replicas == Some(0);
    // A record is only checked when it would be restored; one on a workload someone scaled
    // since only goes away.
    let count = if at_zero {
        match restorable(w, journal, max_replicas) {
            Ok(c) => c,
            Err(why) => {
                out.refused.push(format!("{}: {why}", w.label()));
                return Ok(());
            }
        }
    } else {
        None
    };
    let shown = count.map_or(format!("{UNSET} (1)"), |n| n.to_string());
    if w.kind == Kind::InferenceService {
        let written = patch_once_more(cluster, w.clone(), &|o| {
            o.annotations.get(FROM_ANNOTATION)?;
            if (o.replicas == Some(0)) != at_zero {
                return None;
            }
            let mut p = json!({ "metadata": { "annotations": annotations(None, None) } });
            if at_zero {
                p["spec"] = json!({ "predictor": { "minReplicas": count } });
            }
            Some(p)
        })?;
        match written {
            Some(_) => {
                forget(journal, w);
                out.done.push(if at_zero {
                    format!("{}: minReplicas 0 -> {shown}", w.label())
                } else {
                    format!(
                        "{}: minReplicas is {} (changed since tessera scaled it down): left as it is, record removed",
                        w.label(),
                        w.replicas.map_or("unset".into(), |n| n.to_string())
                    )
                });
            }
            None => out
                .skipped
                .push(format!("{}: changed meanwhile; left as it is", w.label())),
        }
        return Ok(());
    }
    let now = w.replicas.unwrap_or(1);
    if at_zero {
        let to = count.unwrap_or(1);
        match cluster.scale(w.kind, &w.namespace, &w.name, to, &w.resource_version) {
            Ok(s) if s.replicas == to => {}
            Ok(s) => {
                return Err(KubeError::Other(format!(
                    "scaled to {to}, but the API server answered {}: the record stays",
                    s.replicas
                )));
            }
            Err(e) if e.certainly_not_applied() => return Err(e),
            // The answer was lost: restored only if it reads back so.
            Err(e) => match reread(cluster, w) {
                Ok(back) if back.replicas == Some(to) => {
                    eprintln!("tessera: {}: {e}; read back at {to}: restored", w.label());
                }
                Ok(_) | Err(_) => {
                    return Err(KubeError::Other(format!(
                        "{e} (not read back as restored: the record stays, and the next --undo finishes it)"
                    )));
                }
            },
        }
    }
    let remove = json!({ "metadata": { "annotations": annotations(None, None) } });
    if let Err(e) = cluster.patch(w.kind, &w.namespace, &w.name, &remove) {
        if at_zero {
            // Restored, record left: the next --undo sees the count and removes it.
            out.left.push(remove_cmd(w));
        }
        return Err(e);
    }
    forget(journal, w);
    out.done.push(if at_zero {
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
) -> Result<Vec<Object>, KubeError> {
    let mut out = Vec::new();
    for kind in [Kind::Deployment, Kind::StatefulSet, Kind::InferenceService] {
        let list = match cluster.list(kind, namespace) {
            // No KServe in the cluster: no InferenceService to restore.
            Err(KubeError::NotFound(_)) if kind == Kind::InferenceService => Vec::new(),
            r => r?,
        };
        out.extend(
            list.into_iter()
                .filter(|o| o.annotations.contains_key(FROM_ANNOTATION)),
        );
    }
    Ok(out)
}

/// `--undo --yes`: restore `workloads` (from [`scaled`]): refused records are reported and
/// passed over; an API error stops the run.
pub fn undo(
    cluster: &mut dyn Workloads,
    workloads: &[Object],
    journal: &mut Journal,
    max_replicas: Option<i64>,
) -> Outcome {
    let mut out = Outcome::default();
    let mut rest = workloads.iter();
    for w in rest.by_ref() {
        let done = out.done.len();
        let result = undo_one(cluster, w, journal, max_replicas, &mut out);
        super::apply::audit(cluster, w, "ScaledBack", &out.done[done..], &mut out.notes);
        if let Err(e) = result {
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
    use crate::scale_down::journal::Entry;

    fn scaled_down(kind: Kind, from: &str, max: Option<i64>) -> Object {
        Object {
            kind,
            namespace: "ml".into(),
            name: "web".into(),
            labels: BTreeMap::new(),
            annotations: BTreeMap::from([(FROM_ANNOTATION.to_string(), from.to_string())]),
            owners: Vec::new(),
            replicas: Some(0),
            resource_version: "9".into(),
            uid: "uid-web".into(),
            max_replicas: max,
            phase: None,
        }
    }

    #[test]
    fn a_record_is_bounded_by_the_recorded_history() {
        let mut j = Journal::in_memory();
        let d = |from| scaled_down(Kind::Deployment, from, None);
        // No history: refused with the command, unless --undo.max-replicas bounds it.
        let e = restorable(&d("3"), &j, None).unwrap_err();
        assert!(
            e.contains("no recorded history bounds the count")
                && e.contains("kubectl -n ml scale deployment/web --replicas=3"),
            "{e}"
        );
        assert_eq!(restorable(&d("3"), &j, Some(8)), Ok(Some(3)));
        assert!(
            restorable(&d("100000"), &j, Some(8))
                .unwrap_err()
                .contains("above --undo.max-replicas 8")
        );
        // The journal's entry decides.
        j.record(Entry {
            kind: "Deployment".into(),
            namespace: "ml".into(),
            name: "web".into(),
            uid: "uid-web".into(),
            from: "3".into(),
            at: "2026-11-30T00:05:00Z".into(),
        })
        .unwrap();
        assert_eq!(restorable(&d("3"), &j, None), Ok(Some(3)));
        let e = restorable(&d("100000"), &j, Some(1_000_000)).unwrap_err();
        assert!(e.contains("tessera's journal recorded 3"), "{e}");
        // Not counts.
        for bad in ["oops", "0", "-1", "2147483648", ""] {
            assert!(
                restorable(&d(bad), &j, Some(8))
                    .unwrap_err()
                    .contains("is not a replica count"),
                "{bad}"
            );
        }
        // KServe: maxReplicas bounds minReplicas.
        let i = |from, max| scaled_down(Kind::InferenceService, from, max);
        let j = Journal::in_memory();
        assert_eq!(restorable(&i("2", Some(4)), &j, None), Ok(Some(2)));
        assert_eq!(restorable(&i(UNSET, Some(4)), &j, None), Ok(None));
        assert!(
            restorable(&i("100000", Some(4)), &j, None)
                .unwrap_err()
                .contains("above its maxReplicas 4")
        );
    }
}
