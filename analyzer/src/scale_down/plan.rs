//! The plan: each idle pod's owner, the refusals, and the dry run (reads only, over
//! [`Workloads`]).
//!
//! Owners, through the pod's controller ownerReference: a pod labelled
//! `serving.kserve.io/inferenceservice` belongs to that InferenceService; a ReplicaSet to its
//! Deployment (a Deployment owned by an InferenceService to the InferenceService); a
//! StatefulSet to itself. A bare pod (no owner) gets nothing: deleting it is not scaling, and
//! nothing would bring it back. Anything else (a Job, a DaemonSet, a ReplicaSet without a
//! Deployment, a StatefulSet or Deployment owned by another controller, such as a Kubeflow
//! Notebook) is refused: its controller owns the replicas.
//!
//! Refusals (each names the workload and the sign): a pod of the workload that is not idle now;
//! the opt-out (`tessera.io/scale-down` with `false`, `no`, `off`, `0`, `disabled` — any case,
//! spaces around — or any value that is not a yes, label or annotation, on the workload or a pod);
//! a HorizontalPodAutoscaler or KEDA ScaledObject whose `scaleTargetRef` is the workload; GitOps
//! (Argo CD: annotation `argocd.argoproj.io/tracking-id`, label `argocd.argoproj.io/instance`, or
//! label `app.kubernetes.io/instance` with any `argocd.argoproj.io/` annotation; Flux: label
//! `kustomize.toolkit.fluxcd.io/name` or `helm.toolkit.fluxcd.io/name`); a name that is not a
//! Kubernetes name. A workload already at zero is listed as such.
//!
//! What it does not do: write anything ([`super::apply`] does), or follow owners further than
//! these kinds.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use super::idle::{IdleSet, rfc3339};
use super::{
    AT_ANNOTATION, FROM_ANNOTATION, KSERVE_LABEL, Kind, KubeError, OPT_OUT, OPT_OUT_VALUES, Object,
    ScaleTarget, Workloads, is_dns_label, is_dns_subdomain, opts_in,
};
use crate::output::escape::printable as escape_control;

/// One workload to scale to zero.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Action {
    /// The workload as read (Deployment, StatefulSet or InferenceService).
    pub workload: Object,
    /// Its idle pods.
    pub pods: Vec<String>,
    /// Since when all of them are idle (unix ms).
    pub idle_since_ms: i64,
}

impl Action {
    /// The count before: replicas, or KServe `minReplicas` (`None`: not set, KServe's 1).
    pub fn before(&self) -> Option<i64> {
        self.workload.replicas
    }

    /// The `kubectl` commands that do what `--yes` does (the annotation, then the scale).
    pub fn kubectl(&self, at: &str) -> Vec<String> {
        let w = &self.workload;
        let from = match (w.kind, w.replicas) {
            (Kind::InferenceService, None) => super::UNSET.to_string(),
            (_, r) => r.unwrap_or(1).to_string(),
        };
        let annotate = format!(
            "kubectl -n {} annotate {} {} {FROM_ANNOTATION}={from} {AT_ANNOTATION}={at} --overwrite",
            w.namespace,
            w.kind.resource(),
            w.name
        );
        let act = match w.kind {
            Kind::InferenceService => format!(
                "kubectl -n {} patch inferenceservice {} --type merge -p '{{\"spec\":{{\"predictor\":{{\"minReplicas\":0}}}}}}'",
                w.namespace, w.name
            ),
            k => format!(
                "kubectl -n {} scale {}/{} --replicas=0",
                w.namespace,
                k.resource(),
                w.name
            ),
        };
        vec![annotate, act]
    }
}

/// Something tessera will not scale, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// `deployment ml/web`, or `pod ml/x` when there is no workload.
    pub what: String,
    pub why: String,
}

/// The dry run's content.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub actions: Vec<Action>,
    pub refusals: Vec<Refusal>,
    /// Workloads of idle pods that are at zero already.
    pub at_zero: Vec<String>,
}

/// Where a pod belongs.
enum Owner {
    Workload(Kind, String),
    Refused(String, String),
}

/// Per namespace: the objects read once.
struct Namespace<'a> {
    cluster: &'a mut dyn Workloads,
    ns: String,
    cache: BTreeMap<(Kind, String), Option<Object>>,
}

impl Namespace<'_> {
    fn get(&mut self, kind: Kind, name: &str) -> Result<Option<Object>, KubeError> {
        if !is_dns_subdomain(name) {
            return Ok(None);
        }
        let key = (kind, name.to_string());
        if let Some(o) = self.cache.get(&key) {
            return Ok(o.clone());
        }
        let o = self.cluster.get(kind, &self.ns, name)?;
        self.cache.insert(key, o.clone());
        Ok(o)
    }

    /// The workload `pod` belongs to.
    fn owner(&mut self, pod: &Object) -> Result<Owner, KubeError> {
        let pod_label = format!("pod {}/{}", pod.namespace, pod.name);
        if let Some(isvc) = pod.labels.get(KSERVE_LABEL) {
            return self.existing(Kind::InferenceService, isvc, &pod_label);
        }
        let Some(c) = pod.controller().cloned() else {
            return Ok(Owner::Refused(
                pod_label,
                "bare pod: no owner to scale; tessera proposes nothing for it (delete it yourself if it should go)".into(),
            ));
        };
        match c.kind.as_str() {
            "ReplicaSet" => {
                let Some(rs) = self.get(Kind::ReplicaSet, &c.name)? else {
                    return Ok(Owner::Refused(
                        pod_label,
                        format!("its ReplicaSet {} is gone", c.name),
                    ));
                };
                match rs.controller().cloned() {
                    Some(d) if d.kind == "Deployment" => {
                        let Some(dep) = self.get(Kind::Deployment, &d.name)? else {
                            return Ok(Owner::Refused(
                                pod_label,
                                format!("its Deployment {} is gone", d.name),
                            ));
                        };
                        self.top(dep)
                    }
                    Some(o) => Ok(Owner::Refused(
                        rs.label(),
                        format!(
                            "owned by {} {}: its controller owns the replicas",
                            o.kind, o.name
                        ),
                    )),
                    None => Ok(Owner::Refused(
                        rs.label(),
                        "a ReplicaSet without a Deployment: tessera scales Deployments, StatefulSets and InferenceServices".into(),
                    )),
                }
            }
            "StatefulSet" => match self.get(Kind::StatefulSet, &c.name)? {
                Some(s) => self.top(s),
                None => Ok(Owner::Refused(
                    pod_label,
                    format!("its StatefulSet {} is gone", c.name),
                )),
            },
            kind => Ok(Owner::Refused(
                pod_label,
                format!(
                    "owned by {kind} {}: not a workload tessera scales (Deployments, StatefulSets, InferenceServices)",
                    c.name
                ),
            )),
        }
    }

    /// A Deployment or StatefulSet, or the InferenceService that owns it.
    fn top(&mut self, w: Object) -> Result<Owner, KubeError> {
        match w.controller().cloned() {
            None => Ok(Owner::Workload(w.kind, w.name)),
            Some(o) if o.kind == "InferenceService" && w.kind == Kind::Deployment => {
                self.existing(Kind::InferenceService, &o.name, &w.label())
            }
            Some(o) => Ok(Owner::Refused(
                w.label(),
                format!(
                    "managed by {} {} ({}): its controller would revert a scale",
                    o.kind, o.name, o.api_version
                ),
            )),
        }
    }

    fn existing(&mut self, kind: Kind, name: &str, from: &str) -> Result<Owner, KubeError> {
        Ok(match self.get(kind, name)? {
            Some(_) => Owner::Workload(kind, name.to_string()),
            None => Owner::Refused(
                from.to_string(),
                format!(
                    "its {} {:?} was not found",
                    kind.kind(),
                    escape_control(name)
                ),
            ),
        })
    }
}

/// The GitOps sign on an object, if any.
pub fn gitops_sign(o: &Object) -> Option<String> {
    if let Some(v) = o.annotations.get("argocd.argoproj.io/tracking-id") {
        return Some(format!(
            "managed by Argo CD (annotation argocd.argoproj.io/tracking-id={v})"
        ));
    }
    if let Some(v) = o.labels.get("argocd.argoproj.io/instance") {
        return Some(format!(
            "managed by Argo CD (label argocd.argoproj.io/instance={v})"
        ));
    }
    if let Some(v) = o.labels.get("app.kubernetes.io/instance")
        && o.annotations
            .keys()
            .any(|k| k.starts_with("argocd.argoproj.io/"))
    {
        return Some(format!(
            "managed by Argo CD (label app.kubernetes.io/instance={v} with argocd.argoproj.io annotations)"
        ));
    }
    for l in [
        "kustomize.toolkit.fluxcd.io/name",
        "helm.toolkit.fluxcd.io/name",
    ] {
        if let Some(v) = o.labels.get(l) {
            return Some(format!("managed by Flux (label {l}={v})"));
        }
    }
    None
}

/// The opt-out on an object, if any: [`OPT_OUT`] with any value but a yes ([`opts_in`]).
pub fn opt_out(o: &Object) -> Option<String> {
    for (what, map) in [("label", &o.labels), ("annotation", &o.annotations)] {
        if let Some(v) = map.get(OPT_OUT)
            && !opts_in(v)
        {
            let v = escape_control(v);
            let known = OPT_OUT_VALUES
                .iter()
                .any(|n| v.trim().eq_ignore_ascii_case(n));
            return Some(if known {
                format!("opted out: {what} {OPT_OUT}={v} on {}", o.label())
            } else {
                format!(
                    "opted out: {what} {OPT_OUT}={v:?} on {} (not a value tessera knows: taken as an opt-out)",
                    o.label()
                )
            });
        }
    }
    None
}

/// The autoscaler targeting `w`, if any.
pub(super) fn autoscaler(targets: &[ScaleTarget], w: &Object) -> Option<String> {
    targets
        .iter()
        .find(|t| t.kind == w.kind.kind() && t.name == w.name)
        .map(|t| {
            format!(
                "targeted by {} (spec.scaleTargetRef): it owns the replicas",
                t.source
            )
        })
}

/// The plan for the pods of `idle` (in namespace `only`, when given).
pub fn plan(
    cluster: &mut dyn Workloads,
    idle: &IdleSet,
    only: Option<&str>,
) -> Result<Plan, KubeError> {
    let mut out = Plan::default();
    let namespaces: BTreeSet<&String> = idle
        .idle
        .keys()
        .chain(idle.not_now.keys())
        .map(|(ns, _)| ns)
        .filter(|ns| only.is_none_or(|o| o == ns.as_str()))
        .collect();
    for ns in namespaces {
        if !is_dns_label(ns) {
            out.refusals.push(Refusal {
                what: format!("namespace {:?}", escape_control(ns)),
                why: "not a Kubernetes namespace name".into(),
            });
            continue;
        }
        plan_namespace(cluster, idle, ns, &mut out)?;
    }
    Ok(out)
}

/// The running pods (finished ones aside) of workload `kind name` in `namespace`, read now:
/// every pod whose owner chain leads to it. [`super::apply`] reads them again right before a
/// write.
pub fn running_pods(
    cluster: &mut dyn Workloads,
    namespace: &str,
    kind: Kind,
    name: &str,
) -> Result<Vec<String>, KubeError> {
    let pods = cluster.list(Kind::Pod, Some(namespace))?;
    let mut space = Namespace {
        cluster,
        ns: namespace.to_string(),
        cache: BTreeMap::new(),
    };
    let mut out = Vec::new();
    for p in pods
        .iter()
        .filter(|p| !matches!(p.phase.as_deref(), Some("Succeeded" | "Failed")))
    {
        if let Owner::Workload(k, n) = space.owner(p)?
            && k == kind
            && n == name
        {
            out.push(p.name.clone());
        }
    }
    Ok(out)
}

/// The finding pods of namespace `ns` that no running pod has any more (gone since the data
/// was taken, or not a pod name at all): each idle one is refused.
fn refuse_gone_pods(
    idle: &IdleSet,
    ns: &str,
    pods: &BTreeMap<String, Object>,
    refused: &mut BTreeMap<String, String>,
) {
    let key = |p: &str| (ns.to_string(), p.to_string());
    for (n, p) in idle.idle.keys().chain(idle.not_now.keys()) {
        if n == ns && !pods.contains_key(p) {
            let why = if is_dns_subdomain(p) {
                "not found (no running pod of that name: gone since the data was taken)"
            } else {
                "not a Kubernetes pod name"
            };
            if idle.idle.contains_key(&key(p)) {
                refused.insert(format!("pod {ns}/{}", escape_control(p)), why.into());
            }
        }
    }
}

/// Why workload `w` (pods `pods_of`, some idle) is not scaled down, if it is not: a pod of it
/// not idle now, then an opt-out on it or a pod of it, an autoscaler owning it, a GitOps sign.
fn refusal(
    idle: &IdleSet,
    ns: &str,
    w: &Object,
    pods_of: &[&Object],
    targets: &[ScaleTarget],
) -> Option<String> {
    let key = |p: &str| (ns.to_string(), p.to_string());
    let busy: Vec<String> = pods_of
        .iter()
        .filter(|p| !idle.idle.contains_key(&key(&p.name)))
        .map(|p| match idle.not_now.get(&key(&p.name)) {
            Some(why) => format!("pod {}: {why}", p.name),
            None => format!("pod {} has no idle finding", p.name),
        })
        .collect();
    if !busy.is_empty() {
        Some(format!("not every pod is idle now: {}", busy.join("; ")))
    } else {
        opt_out(w)
            .or_else(|| pods_of.iter().find_map(|p| opt_out(p)))
            .or_else(|| autoscaler(targets, w))
            .or_else(|| gitops_sign(w))
    }
}

fn plan_namespace(
    cluster: &mut dyn Workloads,
    idle: &IdleSet,
    ns: &str,
    out: &mut Plan,
) -> Result<(), KubeError> {
    let pods: BTreeMap<String, Object> = cluster
        .list(Kind::Pod, Some(ns))?
        .into_iter()
        .filter(|p| !matches!(p.phase.as_deref(), Some("Succeeded" | "Failed")))
        .map(|p| (p.name.clone(), p))
        .collect();
    let key = |p: &str| (ns.to_string(), p.to_string());
    let mut space = Namespace {
        cluster,
        ns: ns.to_string(),
        cache: BTreeMap::new(),
    };
    // Every running pod's workload, and the pods of the findings that are gone.
    let mut members: BTreeMap<(Kind, String), Vec<&Object>> = BTreeMap::new();
    let mut refused: BTreeMap<String, String> = BTreeMap::new();
    for p in pods.values() {
        match space.owner(p)? {
            Owner::Workload(kind, name) => members.entry((kind, name)).or_default().push(p),
            Owner::Refused(what, why) => {
                if idle.idle.contains_key(&key(&p.name)) {
                    refused.insert(what, why);
                }
            }
        }
    }
    refuse_gone_pods(idle, ns, &pods, &mut refused);
    let targets = if members.is_empty() {
        Vec::new()
    } else {
        space.cluster.scale_targets(ns)?
    };
    for ((kind, name), pods_of) in members {
        let idle_pods: Vec<&&Object> = pods_of
            .iter()
            .filter(|p| idle.idle.contains_key(&key(&p.name)))
            .collect();
        if idle_pods.is_empty() {
            // Pods with findings that are not idle now: say so, naming the workload.
            for p in &pods_of {
                if let Some(why) = idle.not_now.get(&key(&p.name)) {
                    out.refusals.push(Refusal {
                        what: format!("{} {ns}/{name}", kind.resource()),
                        why: format!("pod {}: {why}", p.name),
                    });
                }
            }
            continue;
        }
        let Some(w) = space.get(kind, &name)? else {
            continue;
        };
        let why = refusal(idle, ns, &w, &pods_of, &targets);
        if let Some(why) = why {
            out.refusals.push(Refusal {
                what: w.label(),
                why,
            });
            continue;
        }
        if w.replicas == Some(0) {
            out.at_zero.push(w.label());
            continue;
        }
        out.actions.push(Action {
            idle_since_ms: idle_pods
                .iter()
                .map(|p| idle.idle[&key(&p.name)].idle_since_ms)
                .max()
                .unwrap_or(idle.data_end_ms),
            pods: idle_pods.iter().map(|p| p.name.clone()).collect(),
            workload: w,
        });
    }
    out.refusals
        .extend(refused.into_iter().map(|(what, why)| Refusal { what, why }));
    Ok(())
}

/// The dry run: what `--yes` would do, with the `kubectl` equivalents, and the refusals.
pub fn render(plan: &Plan, at: &str, yes: bool) -> String {
    let mut s = String::new();
    if plan.actions.is_empty() {
        s.push_str("nothing to scale down\n");
    } else {
        let _ = writeln!(
            s,
            "{}",
            if yes {
                "scaling to zero:"
            } else {
                "would scale to zero (dry run: nothing is changed; --yes to apply):"
            }
        );
        for a in &plan.actions {
            let w = &a.workload;
            let count = match (w.kind, a.before()) {
                (Kind::InferenceService, None) => "minReplicas unset (1) -> 0".to_string(),
                (Kind::InferenceService, Some(n)) => format!("minReplicas {n} -> 0"),
                (_, n) => format!("replicas {} -> 0", n.unwrap_or(1)),
            };
            let _ = writeln!(
                s,
                "  {}: {count}; pods {} idle since {}",
                w.label(),
                a.pods.join(", "),
                rfc3339(a.idle_since_ms)
            );
            for line in a.kubectl(at) {
                let _ = writeln!(s, "    {line}");
            }
        }
    }
    for z in &plan.at_zero {
        let _ = writeln!(s, "  {z}: at zero already");
    }
    if !plan.refusals.is_empty() {
        s.push_str("refused:\n");
        for r in &plan.refusals {
            let _ = writeln!(s, "  {}: {}", r.what, escape_control(&r.why));
        }
    }
    s
}
