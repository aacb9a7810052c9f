//! [`Workloads`] over the Kubernetes API with kube-rs: the kubeconfig search of
//! `mig_manager::kube` (`--kubeconfig`, `$KUBECONFIG`, `~/.kube/config`, `--context`, then the
//! in-cluster service account), every call on a current-thread runtime bounded by the request
//! timeout, so a silent API server is an error, never a hang.
//!
//! Objects are read as dynamic objects (only the fields [`Object`] holds); Deployments and
//! StatefulSets are scaled through `…/{name}/scale` with a merge patch of `spec.replicas`; the
//! HorizontalPodAutoscalers are read at `autoscaling/v2`, KEDA's ScaledObjects at
//! `keda.sh/v1alpha1` (a 404 for the list: KEDA is not installed, so none). Names reach the API
//! only as path segments, and only names [`super::is_dns_subdomain`] accepts (kube-rs does not
//! escape them); nothing goes through a shell.
//!
//! Writes are compare-and-swap: merge patches carry the resourceVersion the caller read, and so
//! does the `scale` patch (the API server answers 409 when the object changed since).
//!
//! What it does not do: watch, or write anything but merge patches and `scale`.

use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use serde_json::{Value, json};

use super::{Kind, KubeError, Object, OwnerRef, ScaleTarget, Scaled, Workloads, is_dns_subdomain};
use crate::kubernetes::{Connection, Kube, events};

/// kube-rs behind [`Workloads`].
pub struct KubeWorkloads {
    k: Kube,
}

fn resource(kind: Kind) -> ApiResource {
    let (group, version) = kind
        .api_version()
        .rsplit_once('/')
        .unwrap_or(("", kind.api_version()));
    ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind.kind()))
}

fn object(kind: Kind, o: &DynamicObject) -> Object {
    let m = &o.metadata;
    let replicas = match kind {
        Kind::Pod => None,
        Kind::InferenceService => o.data.pointer("/spec/predictor/minReplicas"),
        _ => o.data.pointer("/spec/replicas"),
    }
    .and_then(Value::as_i64);
    Object {
        kind,
        namespace: m.namespace.clone().unwrap_or_default(),
        name: m.name.clone().unwrap_or_default(),
        labels: m.labels.clone().unwrap_or_default(),
        annotations: m.annotations.clone().unwrap_or_default(),
        owners: m
            .owner_references
            .iter()
            .flatten()
            .map(|r| OwnerRef {
                api_version: r.api_version.clone(),
                kind: r.kind.clone(),
                name: r.name.clone(),
                controller: r.controller == Some(true),
            })
            .collect(),
        // Deployments and StatefulSets default to 1 on the API server.
        replicas: replicas.or((!matches!(kind, Kind::Pod | Kind::InferenceService)).then_some(1)),
        resource_version: m.resource_version.clone().unwrap_or_default(),
        uid: m.uid.clone().unwrap_or_default(),
        max_replicas: match kind {
            Kind::InferenceService => o
                .data
                .pointer("/spec/predictor/maxReplicas")
                .and_then(Value::as_i64),
            _ => None,
        },
        phase: o
            .data
            .pointer("/status/phase")
            .and_then(Value::as_str)
            .map(str::to_string),
    }
}

fn checked(what: &str, name: &str) -> Result<(), KubeError> {
    if is_dns_subdomain(name) {
        Ok(())
    } else {
        Err(KubeError::Other(format!(
            "{what}: {:?} is not a Kubernetes name",
            crate::output::escape::printable(name)
        )))
    }
}

impl KubeWorkloads {
    /// Connect as [`Connection`] says; permission errors name deploy/scale-down/rbac.yaml.
    pub fn connect(conn: &Connection) -> Result<KubeWorkloads, KubeError> {
        Ok(KubeWorkloads {
            k: Kube::connect(conn, "deploy/scale-down/rbac.yaml")?,
        })
    }

    fn api(&self, kind: Kind, namespace: Option<&str>) -> Api<DynamicObject> {
        let ar = resource(kind);
        match namespace {
            Some(ns) => Api::namespaced_with(self.k.client(), ns, &ar),
            None => Api::all_with(self.k.client(), &ar),
        }
    }

    fn targets(
        &self,
        ar: &ApiResource,
        ns: &str,
        default_kind: Option<&str>,
    ) -> Result<Vec<ScaleTarget>, KubeError> {
        let api: Api<DynamicObject> = Api::namespaced_with(self.k.client(), ns, ar);
        let list = self.k.call(
            &format!("list {} in {ns}", ar.plural),
            api.list(&ListParams::default()),
        )?;
        Ok(list
            .items
            .iter()
            .filter_map(|o| {
                let r = o.data.pointer("/spec/scaleTargetRef")?;
                Some(ScaleTarget {
                    source: format!(
                        "{} {ns}/{}",
                        ar.kind,
                        o.metadata.name.as_deref().unwrap_or_default()
                    ),
                    kind: r["kind"]
                        .as_str()
                        .or(default_kind)
                        .unwrap_or_default()
                        .to_string(),
                    name: r["name"].as_str().unwrap_or_default().to_string(),
                })
            })
            .collect())
    }
}

impl Workloads for KubeWorkloads {
    fn get(
        &mut self,
        kind: Kind,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Object>, KubeError> {
        let what = format!("read {} {namespace}/{name}", kind.resource());
        checked(&what, namespace)?;
        checked(&what, name)?;
        let got = self
            .k
            .call(&what, self.api(kind, Some(namespace)).get_opt(name))?;
        Ok(got.map(|o| object(kind, &o)))
    }

    fn list(&mut self, kind: Kind, namespace: Option<&str>) -> Result<Vec<Object>, KubeError> {
        let what = format!(
            "list {}s in {}",
            kind.resource(),
            namespace.unwrap_or("all namespaces")
        );
        if let Some(ns) = namespace {
            checked(&what, ns)?;
        }
        let list = self.k.call(
            &what,
            self.api(kind, namespace).list(&ListParams::default()),
        )?;
        Ok(list.items.iter().map(|o| object(kind, o)).collect())
    }

    fn scale_targets(&mut self, namespace: &str) -> Result<Vec<ScaleTarget>, KubeError> {
        checked("list autoscalers", namespace)?;
        let hpa = ApiResource::from_gvk(&GroupVersionKind::gvk(
            "autoscaling",
            "v2",
            "HorizontalPodAutoscaler",
        ));
        let mut out = self.targets(&hpa, namespace, None)?;
        let keda = ApiResource::from_gvk(&GroupVersionKind::gvk(
            "keda.sh",
            "v1alpha1",
            "ScaledObject",
        ));
        match self.targets(&keda, namespace, Some("Deployment")) {
            Ok(t) => out.extend(t),
            Err(KubeError::NotFound(_)) => {} // no KEDA
            Err(e) => return Err(e),
        }
        Ok(out)
    }

    fn patch(
        &mut self,
        kind: Kind,
        namespace: &str,
        name: &str,
        patch: &Value,
    ) -> Result<Object, KubeError> {
        let what = format!("patch {} {namespace}/{name}", kind.resource());
        checked(&what, namespace)?;
        checked(&what, name)?;
        let api = self.api(kind, Some(namespace));
        let o = self.k.call(
            &what,
            api.patch(name, &PatchParams::default(), &Patch::Merge(patch)),
        )?;
        Ok(object(kind, &o))
    }

    fn scale(
        &mut self,
        kind: Kind,
        namespace: &str,
        name: &str,
        replicas: i64,
        resource_version: &str,
    ) -> Result<Scaled, KubeError> {
        let what = format!("scale {} {namespace}/{name} to {replicas}", kind.resource());
        checked(&what, namespace)?;
        checked(&what, name)?;
        let api = self.api(kind, Some(namespace));
        // The resourceVersion is a precondition: the API server refuses the scale (409) when
        // the object changed since it was read (the Scale's version is the object's).
        let patch = json!({
            "metadata": { "resourceVersion": resource_version },
            "spec": { "replicas": replicas },
        });
        let scale = self.k.call(
            &what,
            api.patch_scale(name, &PatchParams::default(), &Patch::Merge(&patch)),
        )?;
        Ok(Scaled {
            replicas: scale.spec.and_then(|s| s.replicas).map_or(0, i64::from),
            resource_version: scale.metadata.resource_version.unwrap_or_default(),
        })
    }

    fn event(&mut self, change: &events::Change<'_>) -> Result<(), KubeError> {
        events::record(&self.k, change)
    }
}
