//! A queue plan applied to Kueue or Volcano (docs/queues.md, "Kueue", "Volcano"): `tessera
//! queue apply` (every object), `tessera queue edge` (the queues a window edge changes, what the
//! generated CronJobs run) and `tessera queue undo` (every object of the cohort removed).
//!
//! The steps: the scheduler's API must be served (else [`ApplyError::NotInstalled`], nothing
//! planned for a scheduler that is not there); the queues of others are counted (Kueue's
//! LocalQueues, Volcano's Queues: the scheduler in use or not);
//! each object the plan wants is read and compared — absent: create; tessera's and different:
//! update (the spec's changed leaves are printed); not tessera's (no
//! `app.kubernetes.io/managed-by=tessera` label, or another cohort's): the whole apply is refused
//! before any write. tessera's objects of the cohort that the plan no longer has are deleted.
//! Without `yes` this is the dry run. With it, every update is a compare-and-swap (the
//! resourceVersion it was decided on; a 409 reads again and decides again,
//! [`crate::kubernetes::configmap::retry_on_conflict`]), a write whose answer was lost is read
//! back, deletes carry a resourceVersion precondition, and each change is an Event and an audit
//! line. When a step fails, the earlier steps' changes are put back, newest first.
//!
//! What it does not do: decide quotas (the plan), check the evidence's age (the command does),
//! touch objects without tessera's label, or create namespaces.

use std::collections::BTreeSet;
use std::io::Write;

use chrono::{DateTime, Utc};
use kube::api::{DynamicObject, ObjectMeta};
use serde_json::Value;
use tessera_core::mig::plan_queues::QueuePlan;

use super::clock::OffpeakState;
use super::objects::{self, COHORT_LABEL, Desired, MANAGED_BY, QueueKind, Scheduler};
use crate::kubernetes::audit::{Change, Regarding};
use crate::kubernetes::batch::{self, id};
use crate::kubernetes::configmap::{ATTEMPTS, retry_on_conflict};
use crate::kubernetes::{Kube, KubeError, events};

/// Why an apply, edge or undo stopped.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error(
        "{} is not installed: the API server does not serve {}/{} (install it, or apply the queue plan to another scheduler with --scheduler; nothing was changed)",
        .0.name(), .0.group(), .0.version()
    )]
    NotInstalled(Scheduler),
    #[error(
        "{0} exist(s) and are not tessera's (no label app.kubernetes.io/managed-by=tessera with {COHORT_LABEL}={1}): tessera changes only its own objects; rename the cohort (--cohort of queue plan) or remove them (nothing was changed)"
    )]
    Foreign(String, String),
    #[error("{0} is missing: run `tessera queue apply` with this plan first (nothing was changed)")]
    NotApplied(String),
    #[error("the plan: {0}")]
    Plan(String),
    /// A step failed after others had changed the cluster.
    #[error("{cause}; {rollback}")]
    Failed {
        cause: Box<ApplyError>,
        rollback: String,
    },
    #[error(transparent)]
    Kube(#[from] KubeError),
}

/// What the command does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Every object of the plan, and prune.
    All,
    /// The queues a window edge changes only.
    Edge,
}

/// Every object of `plan` for scheduler `s` as of `at`, in creation order, with the off-peak
/// queue's state; an error names a plan that cannot be written as the scheduler's objects.
pub fn desired_objects(
    s: Scheduler,
    plan: &QueuePlan,
    at: DateTime<Utc>,
) -> Result<(Vec<Desired>, Option<OffpeakState>), String> {
    let state = objects::offpeak_state(plan, at)?;
    let objects = match s {
        Scheduler::Kueue => super::kueue::desired(plan, state.as_ref()),
        Scheduler::Volcano => super::volcano::desired(plan, state.as_ref()),
    };
    Ok((objects, state))
}

/// The objects a window edge changes: the off-peak queue and, on Kueue, the shared
/// ClusterQueue that lends it the window's GPUs.
pub fn window_objects(s: Scheduler, plan: &QueuePlan, all: Vec<Desired>) -> Vec<Desired> {
    let shared = super::kueue::shared_queue(&plan.cohort);
    let offpeak = plan.offpeak.as_ref().map(|o| o.queue.clone());
    all.into_iter()
        .filter(|d| {
            d.kind == s.edge_kind()
                && ((s == Scheduler::Kueue && d.name == shared)
                    || Some(&d.name) == offpeak.as_ref())
        })
        .collect()
}

/// One planned change.
#[derive(Debug, Clone)]
enum Step {
    Create(Desired),
    Update(Desired, Vec<String>),
    Delete(QueueKind, Option<String>, String),
}

/// What was (or, in a dry run, would be) changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    pub created: usize,
    pub updated: usize,
    pub deleted: usize,
    pub unchanged: usize,
}

fn selector(cohort: &str) -> String {
    format!("{}={},{COHORT_LABEL}={cohort}", MANAGED_BY.0, MANAGED_BY.1)
}

fn ours(obj: &DynamicObject, cohort: &str) -> bool {
    let l = obj.metadata.labels.as_ref();
    let has = |k: &str, v: &str| l.and_then(|l| l.get(k)).is_some_and(|x| x == v);
    has(MANAGED_BY.0, MANAGED_BY.1) && has(COHORT_LABEL, cohort)
}

fn spec(obj: &DynamicObject) -> Value {
    obj.data.get("spec").cloned().unwrap_or(Value::Null)
}

/// The new dynamic object of `d`.
fn object(d: &Desired, cohort: &str) -> DynamicObject {
    let mut data = serde_json::Map::new();
    data.insert("spec".into(), d.spec.clone());
    DynamicObject {
        types: Some(kube::api::TypeMeta {
            api_version: d.kind.api_version(),
            kind: d.kind.kind().into(),
        }),
        metadata: ObjectMeta {
            name: Some(d.name.clone()),
            namespace: d.namespace.clone(),
            labels: Some(objects::labels(cohort)),
            ..ObjectMeta::default()
        },
        data: serde_json::Value::Object(data),
    }
}

/// The scheduler must be served.
fn require(k: &Kube, s: Scheduler) -> Result<(), ApplyError> {
    if batch::served(k, s)? {
        Ok(())
    } else {
        Err(ApplyError::NotInstalled(s))
    }
}

/// Say whether anything submits to the scheduler besides tessera's queues.
fn say_in_use(k: &Kube, s: Scheduler, cohort: &str, out: &mut dyn Write) -> Result<(), ApplyError> {
    let kind = *s.kinds().last().unwrap_or(&QueueKind::LocalQueue);
    let all = batch::list(k, kind, "")?;
    let others: BTreeSet<String> = all
        .iter()
        .filter(|q| !ours(q, cohort))
        .filter_map(|q| match s {
            Scheduler::Kueue => q.metadata.namespace.clone(),
            Scheduler::Volcano => q.metadata.name.clone(),
        })
        .collect();
    let n = all.iter().filter(|q| !ours(q, cohort)).count();
    let others = others.into_iter().collect::<Vec<_>>().join(", ");
    let _ = if s == Scheduler::Volcano {
        writeln!(
            out,
            "Volcano is installed; {n} Queue(s) of others ({}) left alone (jobs name a queue in spec.queue of a Volcano Job or PodGroup, or with the pod annotation scheduling.volcano.sh/queue-name)",
            if n == 0 { "none" } else { &others }
        )
    } else if n == 0 {
        writeln!(
            out,
            "Kueue is installed; no LocalQueue besides tessera's: no workload is queued through Kueue yet (jobs name a LocalQueue with the label kueue.x-k8s.io/queue-name)"
        )
    } else {
        writeln!(
            out,
            "Kueue is installed and in use: {n} LocalQueue(s) of others, in {others} (left alone)"
        )
    };
    Ok(())
}

fn plan_steps(
    k: &Kube,
    s: Scheduler,
    plan: &QueuePlan,
    want: &[Desired],
    mode: Mode,
) -> Result<(Vec<Step>, usize), ApplyError> {
    let mut steps = Vec::new();
    let mut foreign = Vec::new();
    let mut unchanged = 0;
    for d in want {
        match batch::get(k, d.kind, d.namespace.as_deref(), &d.name)? {
            None if mode == Mode::Edge => return Err(ApplyError::NotApplied(d.id())),
            None => steps.push(Step::Create(d.clone())),
            Some(cur) if !ours(&cur, &plan.cohort) => foreign.push(d.id()),
            Some(cur) => {
                let lines = objects::diff(&spec(&cur), &d.spec);
                if lines.is_empty() {
                    unchanged += 1;
                } else {
                    steps.push(Step::Update(d.clone(), lines));
                }
            }
        }
    }
    if !foreign.is_empty() {
        return Err(ApplyError::Foreign(foreign.join(", "), plan.cohort.clone()));
    }
    if mode == Mode::All {
        let wanted: BTreeSet<String> = want.iter().map(Desired::id).collect();
        for kind in s.kinds().iter().rev() {
            for obj in batch::list(k, *kind, &selector(&plan.cohort))? {
                let name = obj.metadata.name.clone().unwrap_or_default();
                let ns = obj.metadata.namespace.clone();
                if !wanted.contains(&id(*kind, ns.as_deref(), &name)) {
                    steps.push(Step::Delete(*kind, ns, name));
                }
            }
        }
    }
    Ok((steps, unchanged))
}

fn print_steps(steps: &[Step], out: &mut dyn Write) {
    for s in steps {
        let _ = match s {
            Step::Create(d) => writeln!(
                out,
                "+ create {}  {}",
                d.id(),
                crate::output::escape::printable(&d.spec.to_string())
            ),
            Step::Update(d, lines) => {
                let _ = writeln!(out, "~ update {}", d.id());
                lines
                    .iter()
                    .try_for_each(|l| writeln!(out, "    {}", crate::output::escape::printable(l)))
            }
            Step::Delete(kind, ns, name) => {
                writeln!(out, "- delete {}", id(*kind, ns.as_deref(), name))
            }
        };
    }
}

fn record(
    k: &Kube,
    kind: QueueKind,
    ns: Option<&str>,
    name: &str,
    reason: &str,
    note: String,
    err: &mut dyn Write,
) {
    let change = Change {
        regarding: Regarding {
            api_version: kind.api_version(),
            kind: kind.kind().into(),
            namespace: ns.map(str::to_string),
            name: name.to_string(),
            uid: None,
        },
        reason,
        action: "Apply",
        note,
        warning: false,
    };
    events::warn(events::record(k, &change), err);
}

/// Update `d` by compare-and-swap: read, check it is still tessera's, decide, write at the read
/// version; a 409 starts over; a lost answer is read back. The spec it replaced, when it wrote.
fn update(
    k: &Kube,
    plan: &QueuePlan,
    d: &Desired,
    err: &mut dyn Write,
) -> Result<Option<Value>, ApplyError> {
    let ns = d.namespace.as_deref();
    let mut notes = Vec::new();
    let r = retry_on_conflict(
        &d.id(),
        ATTEMPTS,
        err,
        |_| -> Result<Option<Value>, ApplyError> {
            let Some(cur) = batch::get(k, d.kind, ns, &d.name)? else {
                return Err(ApplyError::NotApplied(d.id()));
            };
            if !ours(&cur, &plan.cohort) {
                return Err(ApplyError::Foreign(d.id(), plan.cohort.clone()));
            }
            let lines = objects::diff(&spec(&cur), &d.spec);
            if lines.is_empty() {
                return Ok(None);
            }
            // The read object with the plan's spec fields: its finalizers, other labels and the
            // fields Kueue defaulted stay as they are.
            let mut obj = cur.clone();
            if let (Some(have), Some(want)) = (
                obj.data.get_mut("spec").and_then(|s| s.as_object_mut()),
                d.spec.as_object(),
            ) {
                for (key, v) in want {
                    have.insert(key.clone(), v.clone());
                }
            } else {
                obj.data["spec"] = d.spec.clone();
            }
            match batch::replace(k, d.kind, &obj) {
                Ok(_) => {}
                Err(e) if !e.certainly_not_applied() => {
                    let back = batch::get(k, d.kind, ns, &d.name)?;
                    if !back.is_some_and(|b| objects::diff(&spec(&b), &d.spec).is_empty()) {
                        return Err(e.into());
                    }
                }
                Err(e) => return Err(e.into()),
            }
            record(
                k,
                d.kind,
                ns,
                &d.name,
                "QueueUpdated",
                lines.join("; "),
                &mut notes,
            );
            Ok(Some(spec(&cur)))
        },
    );
    let _ = err.write_all(&notes);
    r
}

impl crate::kubernetes::configmap::MaybeConflict for ApplyError {
    fn conflict(&self) -> Option<&str> {
        match self {
            ApplyError::Kube(KubeError::Conflict(m)) => Some(m),
            _ => None,
        }
    }
}

fn create(k: &Kube, plan: &QueuePlan, d: &Desired, err: &mut dyn Write) -> Result<(), ApplyError> {
    let ns = d.namespace.as_deref();
    match batch::create(k, d.kind, &object(d, &plan.cohort)) {
        Ok(_) => {}
        // Created meanwhile (by another apply): decide again, as an update of tessera's
        // object (or refused, if it is not tessera's).
        Err(KubeError::Conflict(_)) => {
            update(k, plan, d, err)?;
            return Ok(());
        }
        Err(e) if !e.certainly_not_applied() => {
            if batch::get(k, d.kind, ns, &d.name)?.is_none() {
                return Err(e.into());
            }
        }
        Err(e) => return Err(e.into()),
    }
    record(
        k,
        d.kind,
        ns,
        &d.name,
        "QueueCreated",
        format!("spec {}", d.spec),
        err,
    );
    Ok(())
}

fn delete(
    k: &Kube,
    cohort: &str,
    kind: QueueKind,
    ns: Option<&str>,
    name: &str,
    err: &mut dyn Write,
) -> Result<(), ApplyError> {
    let mut notes = Vec::new();
    let r = retry_on_conflict(
        &id(kind, ns, name),
        ATTEMPTS,
        err,
        |_| -> Result<(), ApplyError> {
            let Some(cur) = batch::get(k, kind, ns, name)? else {
                return Ok(());
            };
            if !ours(&cur, cohort) {
                return Err(ApplyError::Foreign(id(kind, ns, name), cohort.to_string()));
            }
            match batch::delete(k, kind, ns, name, cur.metadata.resource_version.clone()) {
                Ok(()) | Err(KubeError::NotFound(_)) => {}
                Err(e) => return Err(e.into()),
            }
            record(
                k,
                kind,
                ns,
                name,
                "QueueDeleted",
                "removed by tessera".into(),
                &mut notes,
            );
            Ok(())
        },
    );
    let _ = err.write_all(&notes);
    r
}

/// What a step changed, to be put back when a later step fails.
enum Done {
    Created(Desired),
    Updated(Desired),
    Deleted(Desired),
}

/// Run the steps in order; when one fails, put back what the earlier ones changed (newest
/// first: created objects deleted, updated specs restored, deleted objects created again) and
/// say so in the error.
fn run_steps(
    k: &Kube,
    plan: &QueuePlan,
    steps: &[Step],
    err: &mut dyn Write,
) -> Result<(), ApplyError> {
    let mut done = Vec::new();
    for s in steps {
        let r = match s {
            Step::Create(d) => create(k, plan, d, err).map(|()| Some(Done::Created(d.clone()))),
            Step::Update(d, _) => update(k, plan, d, err).map(|prior| {
                prior.map(|spec| {
                    Done::Updated(Desired {
                        spec: only_keys(&spec, &d.spec),
                        ..d.clone()
                    })
                })
            }),
            Step::Delete(kind, ns, name) => {
                let prior = batch::get(k, *kind, ns.as_deref(), name)?;
                delete(k, &plan.cohort, *kind, ns.as_deref(), name, err).map(|()| {
                    prior.map(|p| {
                        Done::Deleted(Desired {
                            kind: *kind,
                            namespace: ns.clone(),
                            name: name.clone(),
                            spec: spec(&p),
                        })
                    })
                })
            }
        };
        match r {
            Ok(d) => done.extend(d),
            Err(cause) => {
                let rollback = roll_back(k, plan, done, err);
                return Err(ApplyError::Failed {
                    cause: Box::new(cause),
                    rollback,
                });
            }
        }
    }
    Ok(())
}

/// `spec`'s values of the keys `planned` sets (what an update changed).
fn only_keys(spec: &Value, planned: &Value) -> Value {
    let mut out = serde_json::Map::new();
    for key in planned.as_object().into_iter().flat_map(|m| m.keys()) {
        if let Some(v) = spec.get(key) {
            out.insert(key.clone(), v.clone());
        }
    }
    Value::Object(out)
}

fn roll_back(k: &Kube, plan: &QueuePlan, done: Vec<Done>, err: &mut dyn Write) -> String {
    let n = done.len();
    let mut failed = Vec::new();
    for d in done.into_iter().rev() {
        let r = match &d {
            Done::Created(d) => delete(
                k,
                &plan.cohort,
                d.kind,
                d.namespace.as_deref(),
                &d.name,
                err,
            ),
            Done::Updated(d) => update(k, plan, d, err).map(|_| ()),
            Done::Deleted(d) => create(k, plan, d, err),
        };
        if let Err(e) = r {
            let (Done::Created(d) | Done::Updated(d) | Done::Deleted(d)) = &d;
            failed.push(format!("{}: {e}", d.id()));
        }
    }
    if failed.is_empty() {
        format!("the {n} change(s) made before it were put back")
    } else {
        format!(
            "of the {n} change(s) made before it, these could not be put back: {} (run `tessera queue apply` again, or `tessera queue undo`)",
            failed.join("; ")
        )
    }
}

fn tally(steps: &[Step], unchanged: usize) -> Outcome {
    let mut o = Outcome {
        unchanged,
        ..Outcome::default()
    };
    for s in steps {
        match s {
            Step::Create(_) => o.created += 1,
            Step::Update(..) => o.updated += 1,
            Step::Delete(..) => o.deleted += 1,
        }
    }
    o
}

fn conclude(steps: &[Step], unchanged: usize, yes: bool, out: &mut dyn Write) -> Outcome {
    let o = tally(steps, unchanged);
    say_outcome(&o, steps.len(), "object(s)", yes, out);
    o
}

/// The closing line of an apply or undo: nothing to change (`what` as planned), what was
/// applied, or what the dry run would change (`n` changes).
pub(super) fn say_outcome(o: &Outcome, n: usize, what: &str, yes: bool, out: &mut dyn Write) {
    let unchanged = o.unchanged;
    let _ = if n == 0 {
        writeln!(out, "nothing to change ({unchanged} {what} as planned)")
    } else if yes {
        writeln!(
            out,
            "applied: {} created, {} updated, {} deleted, {unchanged} unchanged",
            o.created, o.updated, o.deleted
        )
    } else {
        writeln!(
            out,
            "dry run: nothing changed; --yes makes these {n} change(s)"
        )
    };
}

/// Apply `plan` to scheduler `s` as of `at` (every object, or the queues of a window edge).
#[allow(clippy::too_many_arguments)]
pub fn apply(
    k: &Kube,
    s: Scheduler,
    plan: &QueuePlan,
    at: DateTime<Utc>,
    mode: Mode,
    yes: bool,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<Outcome, ApplyError> {
    require(k, s)?;
    let (mut want, state) = desired_objects(s, plan, at).map_err(ApplyError::Plan)?;
    if mode == Mode::Edge {
        if plan.offpeak.is_none() {
            return Err(ApplyError::Plan(
                "no off-peak queue: no window edges".into(),
            ));
        }
        want = window_objects(s, plan, want);
    } else {
        say_in_use(k, s, &plan.cohort, out)?;
    }
    if let Some(note) = (s == Scheduler::Volcano)
        .then(|| super::volcano::models_note(plan))
        .flatten()
    {
        let _ = writeln!(out, "{}", crate::output::escape::printable(&note));
    }
    if let (Some(o), Some(st)) = (&plan.offpeak, &state) {
        let gpus: Vec<String> = st
            .gpus
            .iter()
            .map(|m| format!("{} {}", m.gpus, m.model))
            .collect();
        let stop = match s {
            Scheduler::Kueue => format!("stopPolicy {}", st.stop.as_str()),
            Scheduler::Volcano => format!(
                "reclaimable {}",
                st.stop == super::clock::Stop::HoldAndDrain
            ),
        };
        let line = format!(
            "off-peak queue {}: {} ({}), {stop}",
            o.queue,
            st.why,
            gpus.join(", "),
        );
        // Model names come from the data: escaped like every other output.
        let _ = writeln!(out, "{}", crate::output::escape::printable(&line));
    }
    let (steps, unchanged) = plan_steps(k, s, plan, &want, mode)?;
    print_steps(&steps, out);
    if yes {
        run_steps(k, plan, &steps, err)?;
    }
    Ok(conclude(&steps, unchanged, yes, out))
}

/// Remove every object of `cohort` that is tessera's from scheduler `s` (Kueue: LocalQueues,
/// then ClusterQueues, then ResourceFlavors).
pub fn undo(
    k: &Kube,
    s: Scheduler,
    cohort: &str,
    yes: bool,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<Outcome, ApplyError> {
    require(k, s)?;
    let mut steps = Vec::new();
    for kind in s.kinds().iter().rev() {
        for obj in batch::list(k, *kind, &selector(cohort))? {
            let name = obj.metadata.name.clone().unwrap_or_default();
            steps.push(Step::Delete(*kind, obj.metadata.namespace.clone(), name));
        }
    }
    print_steps(&steps, out);
    if yes {
        for s in &steps {
            if let Step::Delete(kind, ns, name) = s {
                delete(k, cohort, *kind, ns.as_deref(), name, err)?;
            }
        }
    }
    Ok(conclude(&steps, 0, yes, out))
}
