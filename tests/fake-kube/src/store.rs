//! The object store: every object as JSON, one global resourceVersion counter (like etcd's
//! revision), and the event history that watches replay.
//!
//! What it does: create, replace (optimistic concurrency on `metadata.resourceVersion`), JSON
//! merge patch (RFC 7386), delete; a no-op write changes nothing and bumps no resourceVersion,
//! as on the real apiserver; compaction of the history; per-node histories of the two
//! mig-manager labels and of the device plugin's config label; the triggers that start the
//! scripted mig-manager and device plugin; node status writes (the scripted controllers' only).
//!
//! Kueue's and Volcano's kinds are decoded strictly ([`crate::crd`]) and admitted by
//! [`crate::kueue`] and [`crate::volcano`] on every create, replace and patch (400 unknown
//! fields before the resourceVersion check, 422 invalid and webhook denials after it, as on the
//! apiserver); a delete of a Volcano Queue goes through Volcano's webhook (after the 404).
//!
//! What it does not do: no admission for the other kinds, no validation of object schemas
//! beyond what the fake needs and those kinds,
//! no finalizers or graceful deletion, generateName with a counter for a suffix, no server-side apply, no status
//! subresources beyond `scale` (the status of Nodes, Pods, the `apps` workloads and Volcano
//! Queues is kept across replace and patch, as their main endpoints do; a create keeps the
//! status it is given).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::objects::{ApiError, Kind, now_rfc3339};
use crate::{Behaviour, Request};

/// The node label mig-manager applies.
pub(crate) const MIG_CONFIG: &str = "nvidia.com/mig.config";
/// The node label mig-manager reports progress in.
pub(crate) const MIG_STATE: &str = "nvidia.com/mig.config.state";
/// The node label that places mig-manager on a node.
pub(crate) const MIG_MANAGER_DEPLOY: &str = "nvidia.com/gpu.deploy.mig-manager";
/// The node label that selects the device plugin's config (a key of its ConfigMap).
pub(crate) const DP_CONFIG: &str = "nvidia.com/device-plugin.config";
/// The node label that places the device plugin on a node.
pub(crate) const DP_DEPLOY: &str = "nvidia.com/gpu.deploy.device-plugin";

/// The type of a stored event.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    /// The wire name.
    pub(crate) fn wire(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One write, as watches see it.
pub(crate) struct Event {
    pub(crate) rv: u64,
    pub(crate) kind: Kind,
    pub(crate) etype: EventType,
    /// The object after the write (for a delete: the deleted object, at the delete's version).
    pub(crate) object: Value,
    /// The object before a modification, for selector transitions.
    pub(crate) prev: Option<Value>,
}

/// Which scripted controller a trigger starts.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Controller {
    MigManager,
    DevicePlugin,
}

/// A label change a scripted controller acts on.
pub(crate) struct Trigger {
    pub(crate) controller: Controller,
    pub(crate) node: String,
    /// The label's new value (the device plugin: `""` when it was removed: the default config).
    pub(crate) config: String,
    pub(crate) generation: u64,
}

/// (kind, namespace or "", name).
pub(crate) type Key = (Kind, String, String);

/// Everything the server holds, behind one lock.
pub(crate) struct Store {
    /// The global resourceVersion: the version of the last write.
    pub(crate) rv: u64,
    pub(crate) objects: BTreeMap<Key, Value>,
    pub(crate) history: Vec<Event>,
    /// Events at or below this version are forgotten.
    pub(crate) compacted: u64,
    /// How many of the next watches from a resourceVersion get 410 Expired whatever it is.
    pub(crate) expire_watches: usize,
    pub(crate) label_history: HashMap<String, Vec<Option<String>>>,
    pub(crate) state_history: HashMap<String, Vec<Option<String>>>,
    /// Triggers of the last write, taken by `Shared::write` once the lock is released.
    pub(crate) triggers: Vec<Trigger>,
    /// Per node: the generation of the latest trigger; older runs stop.
    pub(crate) mig_generation: HashMap<String, u64>,
    pub(crate) scripts: HashMap<(String, String), Behaviour>,
    pub(crate) mig_configmap: (String, String),
    pub(crate) mig_step_delay: Duration,
    /// Per node: the generation of the latest device plugin trigger; older runs stop.
    pub(crate) dp_generation: HashMap<String, u64>,
    pub(crate) dp_scripts: HashMap<(String, String), crate::PluginBehaviour>,
    /// The namespace of the device plugin's ConfigMap (the operator's).
    pub(crate) dp_namespace: String,
    pub(crate) dp_step_delay: Duration,
    pub(crate) dp_label_history: HashMap<String, Vec<Option<String>>>,
    /// Once a request matching this was handled, every later request gets 500.
    pub(crate) down_after: Option<crate::Fault>,
    pub(crate) down: bool,
    pub(crate) conflict_next_put: bool,
    /// Kinds whose next PUT or PATCH finds the object written by another writer first.
    pub(crate) conflict_next_write: BTreeSet<Kind>,
    /// The optional API groups (Kueue's, Volcano's) not installed: absent from discovery, their
    /// paths 404s.
    pub(crate) uninstalled: BTreeSet<&'static str>,
    pub(crate) close_watches_after: Option<Duration>,
    pub(crate) requests: Vec<Request>,
    /// Scripted failures, first match wins ([`crate::Fault`]).
    pub(crate) faults: Vec<crate::Fault>,
    /// Held requests and changes before requests ([`crate::late`]).
    pub(crate) late: crate::hold::Late,
}

impl Store {
    /// An empty store.
    pub(crate) fn new() -> Store {
        Store {
            rv: 1,
            objects: BTreeMap::new(),
            history: Vec::new(),
            compacted: 0,
            expire_watches: 0,
            label_history: HashMap::new(),
            state_history: HashMap::new(),
            triggers: Vec::new(),
            mig_generation: HashMap::new(),
            scripts: HashMap::new(),
            mig_configmap: ("gpu-operator".into(), "custom-mig-config".into()),
            mig_step_delay: Duration::from_millis(80),
            dp_generation: HashMap::new(),
            dp_scripts: HashMap::new(),
            dp_namespace: "gpu-operator".into(),
            dp_step_delay: Duration::from_millis(80),
            dp_label_history: HashMap::new(),
            down_after: None,
            down: false,
            conflict_next_put: false,
            conflict_next_write: BTreeSet::new(),
            uninstalled: BTreeSet::new(),
            close_watches_after: None,
            requests: Vec::new(),
            faults: Vec::new(),
            late: crate::hold::Late::new(),
        }
    }

    /// The stored object.
    pub(crate) fn get(&self, kind: Kind, ns: &str, name: &str) -> Option<&Value> {
        self.objects.get(&(kind, ns.to_string(), name.to_string()))
    }

    /// Objects of one kind, in one namespace or all.
    pub(crate) fn list(&self, kind: Kind, ns: Option<&str>) -> Vec<Value> {
        self.objects
            .iter()
            .filter(|((k, n, _), _)| *k == kind && ns.is_none_or(|ns| ns == n))
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// Creates an object (409 AlreadyExists when present). `obj` carries metadata.name (and
    /// metadata.namespace for namespaced kinds).
    pub(crate) fn create(&mut self, kind: Kind, mut obj: Value) -> Result<Value, ApiError> {
        // generateName: the prefix and a suffix unique in this store (the apiserver's is 5
        // random characters).
        if obj["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .is_empty()
            && let Some(prefix) = obj["metadata"]["generateName"].as_str()
        {
            let name = format!("{prefix}{:05x}", self.rv + 1);
            metadata_mut(&mut obj).insert("name".into(), json!(name));
        }
        let (ns, name) = key_of(kind, &obj)?;
        crate::crd::decode(kind, schema(kind), &obj)?;
        self.admit(kind, &mut obj, None)?;
        let key = (kind, ns.clone(), name.clone());
        if self.objects.contains_key(&key) {
            return Err(ApiError::already_exists(kind, &name));
        }
        self.rv += 1;
        let rv = self.rv;
        set_type(kind, &mut obj);
        let meta = metadata_mut(&mut obj);
        meta.insert("resourceVersion".into(), json!(rv.to_string()));
        meta.insert(
            "uid".into(),
            json!(format!("00000000-0000-4000-8000-{rv:012x}")),
        );
        meta.insert("creationTimestamp".into(), json!(now_rfc3339()));
        meta.remove("generateName");
        if !kind.namespaced() {
            meta.remove("namespace");
        }
        if kind.has_scale() && obj["spec"]["replicas"].as_i64().is_none() {
            // The apiserver's default.
            obj["spec"]["replicas"] = json!(1);
        }
        if kind == Kind::Node {
            let labels = labels_of(&obj);
            self.label_history
                .insert(name.clone(), vec![labels.get(MIG_CONFIG).cloned()]);
            self.state_history
                .insert(name.clone(), vec![labels.get(MIG_STATE).cloned()]);
            self.dp_label_history
                .insert(name.clone(), vec![labels.get(DP_CONFIG).cloned()]);
        }
        self.objects.insert(key, obj.clone());
        self.history.push(Event {
            rv,
            kind,
            etype: EventType::Added,
            object: obj.clone(),
            prev: None,
        });
        Ok(obj)
    }

    /// Replaces an object. With `expected_rv`, it must equal the stored version (else 409
    /// Conflict). Identity fields (name, namespace, uid, creationTimestamp), `apiVersion`,
    /// `kind` and the status of Nodes and Pods are kept. A write that changes nothing returns the
    /// stored object unchanged unless `force` (which bumps the version anyway).
    pub(crate) fn replace(
        &mut self,
        kind: Kind,
        ns: &str,
        name: &str,
        new: Value,
        expected_rv: Option<&str>,
        force: bool,
    ) -> Result<Value, ApiError> {
        self.replace_inner(kind, ns, name, new, expected_rv, force, kind.keeps_status())
    }

    /// Sets a node's status (what the kubelet and the device plugin report): `f` edits a copy
    /// of the stored status; one write, like a PUT of the `status` subresource.
    pub(crate) fn set_node_status(
        &mut self,
        name: &str,
        f: impl FnOnce(&mut Value),
    ) -> Result<Value, ApiError> {
        let Some(mut node) = self.get(Kind::Node, "", name).cloned() else {
            return Err(ApiError::not_found(Kind::Node, name));
        };
        if !node["status"].is_object() {
            node["status"] = json!({});
        }
        f(&mut node["status"]);
        self.replace_inner(Kind::Node, "", name, node, None, false, false)
    }

    #[allow(clippy::too_many_arguments)]
    fn replace_inner(
        &mut self,
        kind: Kind,
        ns: &str,
        name: &str,
        mut new: Value,
        expected_rv: Option<&str>,
        force: bool,
        keep_status: bool,
    ) -> Result<Value, ApiError> {
        let key = (kind, ns.to_string(), name.to_string());
        let Some(old) = self.objects.get(&key).cloned() else {
            return Err(ApiError::not_found(kind, name));
        };
        crate::crd::decode(kind, schema(kind), &new)?;
        if let Some(expected) = expected_rv
            && Some(expected) != old["metadata"]["resourceVersion"].as_str()
        {
            return Err(ApiError::conflict(kind, name));
        }
        set_type(kind, &mut new);
        {
            let old_meta = old["metadata"].as_object().cloned().unwrap_or_default();
            let meta = metadata_mut(&mut new);
            for field in [
                "name",
                "namespace",
                "uid",
                "creationTimestamp",
                "resourceVersion",
            ] {
                match old_meta.get(field) {
                    Some(v) => meta.insert(field.into(), v.clone()),
                    None => meta.remove(field),
                };
            }
        }
        if keep_status {
            match old.get("status") {
                Some(s) => new["status"] = s.clone(),
                None => {
                    if let Some(o) = new.as_object_mut() {
                        o.remove("status");
                    }
                }
            }
        }
        self.admit(kind, &mut new, Some(&old))?;
        if new == old && !force {
            return Ok(old);
        }
        self.rv += 1;
        let rv = self.rv;
        metadata_mut(&mut new).insert("resourceVersion".into(), json!(rv.to_string()));
        if kind == Kind::Node {
            self.node_hooks(name, &old, &new);
        }
        self.objects.insert(key, new.clone());
        self.history.push(Event {
            rv,
            kind,
            etype: EventType::Modified,
            object: new.clone(),
            prev: Some(old),
        });
        Ok(new)
    }

    /// The admission of the kinds validated here (`old`: the stored object on an update): Ok
    /// with `obj` defaulted, or the 422 or webhook denial.
    fn admit(&self, kind: Kind, obj: &mut Value, old: Option<&Value>) -> Result<(), ApiError> {
        match kind {
            Kind::VolcanoQueue => {
                crate::volcano::admit(obj, old, &self.list(Kind::VolcanoQueue, None))
            }
            k if k.is_kueue() => crate::kueue::admit(k, obj, old),
            _ => Ok(()),
        }
    }

    /// Applies a JSON merge patch (RFC 7386) to the stored object. A `metadata.resourceVersion`
    /// in the patch is a precondition (409 Conflict when stale), as on the real apiserver.
    pub(crate) fn merge_patch(
        &mut self,
        kind: Kind,
        ns: &str,
        name: &str,
        patch: &Value,
    ) -> Result<Value, ApiError> {
        let Some(old) = self.get(kind, ns, name).cloned() else {
            return Err(ApiError::not_found(kind, name));
        };
        if !patch.is_object() {
            return Err(ApiError::bad_request("the patch must be a JSON object"));
        }
        let expected = patch["metadata"]["resourceVersion"]
            .as_str()
            .map(str::to_string);
        let mut new = old;
        merge_patch(&mut new, patch);
        self.replace(kind, ns, name, new, expected.as_deref(), false)
    }

    /// Another writer first ([`crate::FakeKube::conflict_next_write`]): when the next write of
    /// `kind` was scripted to conflict, the stored object gets a new resourceVersion (nothing
    /// else changes), so a write that carries the version it read gets 409 Conflict.
    pub(crate) fn other_writer_first(
        &mut self,
        kind: Kind,
        ns: &str,
        name: &str,
    ) -> Result<(), ApiError> {
        if self.conflict_next_write.remove(&kind)
            && let Some(current) = self.get(kind, ns, name).cloned()
        {
            self.replace(kind, ns, name, current, None, true)?;
        }
        Ok(())
    }

    /// Deletes an object (404 when absent, then Volcano's webhook for a Queue); returns it at
    /// the delete's version.
    pub(crate) fn delete(&mut self, kind: Kind, ns: &str, name: &str) -> Result<Value, ApiError> {
        let key = (kind, ns.to_string(), name.to_string());
        if !self.objects.contains_key(&key) {
            return Err(ApiError::not_found(kind, name));
        }
        if kind == Kind::VolcanoQueue {
            crate::volcano::admit_delete(name, &self.list(kind, None))?;
        }
        let Some(mut obj) = self.objects.remove(&key) else {
            return Err(ApiError::not_found(kind, name));
        };
        self.rv += 1;
        let rv = self.rv;
        metadata_mut(&mut obj).insert("resourceVersion".into(), json!(rv.to_string()));
        if kind == Kind::Node {
            *self.mig_generation.entry(name.to_string()).or_default() += 1;
            *self.dp_generation.entry(name.to_string()).or_default() += 1;
        }
        self.history.push(Event {
            rv,
            kind,
            etype: EventType::Deleted,
            object: obj.clone(),
            prev: None,
        });
        Ok(obj)
    }

    /// Forgets the history: a watch from an older version then gets 410 Expired.
    pub(crate) fn compact(&mut self) {
        self.compacted = self.rv;
        self.history.clear();
    }

    /// Records the mig-manager labels' histories and the triggers of a node write.
    fn node_hooks(&mut self, name: &str, old: &Value, new: &Value) {
        let (before, after) = (labels_of(old), labels_of(new));
        if before.get(MIG_STATE) != after.get(MIG_STATE) {
            self.state_history
                .entry(name.to_string())
                .or_default()
                .push(after.get(MIG_STATE).cloned());
        }
        if before.get(MIG_CONFIG) != after.get(MIG_CONFIG) {
            self.label_history
                .entry(name.to_string())
                .or_default()
                .push(after.get(MIG_CONFIG).cloned());
            if let Some(config) = after.get(MIG_CONFIG)
                && after.get(MIG_MANAGER_DEPLOY).map(String::as_str) == Some("true")
            {
                let generation = self.mig_generation.entry(name.to_string()).or_default();
                *generation += 1;
                self.triggers.push(Trigger {
                    controller: Controller::MigManager,
                    node: name.to_string(),
                    config: config.clone(),
                    generation: *generation,
                });
            }
        }
        if before.get(DP_CONFIG) != after.get(DP_CONFIG) {
            self.dp_label_history
                .entry(name.to_string())
                .or_default()
                .push(after.get(DP_CONFIG).cloned());
            if after.get(DP_DEPLOY).map(String::as_str) == Some("true") {
                let generation = self.dp_generation.entry(name.to_string()).or_default();
                *generation += 1;
                self.triggers.push(Trigger {
                    controller: Controller::DevicePlugin,
                    node: name.to_string(),
                    config: after.get(DP_CONFIG).cloned().unwrap_or_default(),
                    generation: *generation,
                });
            }
        }
    }
}

/// RFC 7386 JSON merge patch: objects merge recursively, `null` deletes, anything else
/// replaces (arrays included).
pub(crate) fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let t = target.as_object_mut().expect("an object");
    for (k, v) in p {
        if v.is_null() {
            t.remove(k);
        } else {
            merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

/// The labels of an object.
pub(crate) fn labels_of(obj: &Value) -> BTreeMap<String, String> {
    obj["metadata"]["labels"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// `metadata` as a mutable map (created when absent).
pub(crate) fn metadata_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = json!({});
    }
    let o = obj.as_object_mut().expect("an object");
    let meta = o.entry("metadata").or_insert_with(|| json!({}));
    if !meta.is_object() {
        *meta = json!({});
    }
    meta.as_object_mut().expect("an object")
}

fn set_type(kind: Kind, obj: &mut Value) {
    metadata_mut(obj);
    let o = obj.as_object_mut().expect("an object");
    o.insert("apiVersion".into(), json!(kind.api_version()));
    o.insert("kind".into(), json!(kind.kind()));
}

fn key_of(kind: Kind, obj: &Value) -> Result<(String, String), ApiError> {
    let name = obj["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if name.is_empty() {
        return Err(ApiError::invalid(
            kind,
            "",
            "metadata.name: Required value: name or generateName is required",
        ));
    }
    let ns = if kind.namespaced() {
        obj["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    } else {
        String::new()
    };
    Ok((ns, name))
}

/// The schema a custom resource is decoded with (None: decoded without one).
fn schema(kind: Kind) -> Option<&'static crate::crd::S> {
    match kind {
        Kind::VolcanoQueue => Some(&crate::volcano::QUEUE),
        k if k.is_kueue() => crate::kueue::schema(k),
        _ => None,
    }
}
