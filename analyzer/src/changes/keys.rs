//! The keys change detection and comparison put rows under: a GPU's label (`node/GPUi`, else
//! `node/uuid`) and a workload's identity (the pod, else the Slurm job and process, else the
//! node, pid and process name), each an interned string built once per distinct key of a
//! frame's rows. A small direct-mapped cache sits in front of the key map (a node's rows cycle
//! through a few GPUs and processes), so most rows cost no hashing.
//!
//! It reads columns and names things; it decides nothing.

use polars::prelude::*;

use super::ChangesError;
use crate::frames::columns::{DirectCache, FastMap, cache_slot, cache_word as word, i64s, strs};

/// Strings numbered in order of first appearance.
#[derive(Default)]
pub(super) struct Interner {
    map: FastMap<String, u32>,
    pub names: Vec<String>,
}

impl Interner {
    pub(super) fn id(&mut self, s: String) -> u32 {
        if let Some(&id) = self.map.get(&s) {
            return id;
        }
        let id = self.names.len() as u32;
        self.names.push(s.clone());
        self.map.insert(s, id);
        id
    }
}

/// A GPU's label: `node/GPUi`, else `node/uuid`.
pub(super) fn gpu_label(node: Option<&str>, index: Option<i64>, uuid: Option<&str>) -> String {
    let node = node.unwrap_or("?");
    match (index, uuid) {
        (Some(i), _) => format!("{node}/GPU{i}"),
        (None, Some(u)) => format!("{node}/{u}"),
        (None, None) => format!("{node}/?"),
    }
}

/// A workload's identity: the pod (`namespace/pod`), else the Slurm job and process, else the
/// node, pid and process name (a process cannot keep its pid on another node).
pub(super) fn workload_key(
    node: Option<&str>,
    pid: Option<i64>,
    process: Option<&str>,
    namespace: Option<&str>,
    pod: Option<&str>,
    slurm: Option<&str>,
) -> String {
    match (pod, slurm) {
        (Some(p), _) => format!("{}/{p}", namespace.unwrap_or("default")),
        (None, Some(j)) => format!("slurm job {j} {}", process.unwrap_or("?")),
        (None, None) => format!(
            "{} pid {} ({})",
            node.unwrap_or("?"),
            pid.map_or("?".into(), |p| p.to_string()),
            process.unwrap_or("?")
        ),
    }
}

/// Row keys to ids: the direct cache, then the map, then `make`.
struct Keyed<K> {
    cache: DirectCache<K, u32>,
    map: FastMap<K, u32>,
}

impl<K: Copy + Eq + std::hash::Hash> Keyed<K> {
    fn new() -> Self {
        Keyed {
            cache: DirectCache::default(),
            map: FastMap::default(),
        }
    }

    fn id(&mut self, key: K, slot: usize, make: impl FnOnce() -> u32) -> u32 {
        if let Some(id) = self.cache.get(slot, &key) {
            return id;
        }
        let id = *self.map.entry(key).or_insert_with(make);
        self.cache.put(slot, key, id);
        id
    }
}

/// Each row's GPU (its [`gpu_label`] interned in `labels`): a label is built once per distinct
/// (node, index, uuid) of the frame.
pub(super) fn gpu_ids(df: &DataFrame, labels: &mut Interner) -> Result<Vec<u32>, ChangesError> {
    let (node, uuid, index) = (strs(df, "node")?, strs(df, "uuid")?, i64s(df, "gpu")?);
    let (n, u) = (node.ids(), uuid.ids());
    let mut keyed: Keyed<(Option<u32>, Option<i64>, Option<u32>)> = Keyed::new();
    Ok((0..df.height())
        .map(|i| {
            let key = (n.at(i), index.get(i), u.at(i));
            let slot = cache_slot([word(key.0), word(key.1), word(key.2)]);
            keyed.id(key, slot, || {
                labels.id(gpu_label(n.get(i), index.get(i), u.get(i)))
            })
        })
        .collect())
}

/// Each row's workload (its [`workload_key`] interned in `keys`), built once per distinct
/// identity of the frame.
pub(super) fn workload_ids(df: &DataFrame, keys: &mut Interner) -> Result<Vec<u32>, ChangesError> {
    let (node, name) = (strs(df, "node")?, strs(df, "process")?);
    let (ns, pod, slurm) = (
        strs(df, "namespace")?,
        strs(df, "pod")?,
        strs(df, "slurm_job_id")?,
    );
    let pid = i64s(df, "pid")?;
    let (node, name, ns, pod, slurm) = (node.ids(), name.ids(), ns.ids(), pod.ids(), slurm.ids());
    type Key = (
        Option<u32>,
        Option<i64>,
        Option<u32>,
        Option<u32>,
        Option<u32>,
        Option<u32>,
    );
    let mut keyed: Keyed<Key> = Keyed::new();
    Ok((0..df.height())
        .map(|i| {
            let key: Key = (
                node.at(i),
                pid.get(i),
                name.at(i),
                ns.at(i),
                pod.at(i),
                slurm.at(i),
            );
            let slot = cache_slot([
                word(key.0),
                word(key.1),
                word(key.2),
                word(key.3),
                word(key.4),
                word(key.5),
            ]);
            keyed.id(key, slot, || {
                keys.id(workload_key(
                    node.get(i),
                    pid.get(i),
                    name.get(i),
                    ns.get(i),
                    pod.get(i),
                    slurm.get(i),
                ))
            })
        })
        .collect())
}
