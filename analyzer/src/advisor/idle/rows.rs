//! The idle-loaded detector's rows: every entity of one partition (processes, MIG instances
//! without process rows, whole GPUs outside MIG mode without process rows) with its series of
//! rows sorted by `ts`, each row carrying the activity it is judged by (first present: the
//! process's SM, its MIG instance's SM, the GPU's SM, the GPU's busy) and its whole GPU's (or
//! MIG instance's) activity.
//!
//! Rows are matched in Rust, not by joins on string keys (see [`entities`]). This module does
//! not judge idleness or build spans (that is [`super::idle_entities`]).

use super::cols::{GpuCols, MigCols, ProcCols, gpu_frame, mig_frame, process_frame};
use crate::advisor::{AdvisorError, Entity};
use crate::frames::Frames;
use crate::frames::columns::{FastMap as HashMap, FastSet as HashSet};

/// Interns `(node, uuid)` pairs of one partition as small integers.
#[derive(Default)]
struct GpuIds<'a> {
    ids: HashMap<(&'a str, &'a str), u32>,
    last: Option<((&'a str, &'a str), u32)>,
}

impl<'a> GpuIds<'a> {
    fn id(&mut self, node: &'a str, uuid: &'a str) -> u32 {
        if let Some((k, v)) = self.last
            && k == (node, uuid)
        {
            return v;
        }
        let n = self.ids.len() as u32;
        let v = *self.ids.entry((node, uuid)).or_insert(n);
        self.last = Some(((node, uuid), v));
        v
    }
    fn get(&self, node: &str, uuid: &str) -> Option<u32> {
        self.ids.get(&(node, uuid)).copied()
    }
}

/// One MIG instance at one timestamp (rows of the same instance and `ts` combined).
#[derive(Clone, Copy)]
struct MigAt {
    ts: i64,
    sm: Option<f64>,
    mem: f64,
    gpu: Option<i64>,
    interval: Option<i64>,
}

impl MigAt {
    /// Adds another row of the same instance and `ts`: SM activity max, memory sum, the rest
    /// from the first row.
    fn absorb(&mut self, o: &MigAt) {
        self.sm = match (self.sm, o.sm) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        self.mem += o.mem;
        self.gpu = self.gpu.or(o.gpu);
        self.interval = self.interval.or(o.interval);
    }
}

/// A MIG instance: its first MIG UUID and profile, and its rows combined per `ts`, by `ts`.
struct Instance {
    id: u32,
    gi: Option<i64>,
    mig_uuid: Option<String>,
    profile: Option<String>,
    at: Vec<MigAt>,
    /// Whether `at` is still in `ts` order (rows normally come in time order).
    sorted: bool,
}

impl Instance {
    fn push(&mut self, m: MigAt) {
        match self.at.last_mut() {
            Some(last) if last.ts == m.ts => last.absorb(&m),
            Some(last) => {
                self.sorted &= last.ts < m.ts;
                self.at.push(m);
            }
            None => self.at.push(m),
        }
    }

    /// Sorts by `ts` (stable) and combines rows of equal `ts`, when they came out of order.
    fn finish(&mut self) {
        if self.sorted {
            return;
        }
        self.at.sort_by_key(|m| m.ts);
        let mut out: Vec<MigAt> = Vec::with_capacity(self.at.len());
        for m in self.at.drain(..) {
            match out.last_mut() {
                Some(last) if last.ts == m.ts => last.absorb(&m),
                _ => out.push(m),
            }
        }
        self.at = out;
        self.sorted = true;
    }
}

/// The first position in `items` (sorted by `key`) whose key is `t` or later, found from a
/// forward cursor: an entity's rows come in time order, so each lookup moves the cursor by a step or
/// two instead of hashing `(entity, ts)` — the random accesses of such a hash map dominated the
/// detector (docs/performance.md). Out-of-order lookups fall back to a binary search.
fn seek<T>(items: &[T], key: impl Fn(&T) -> i64, cur: &mut usize, t: i64) -> Option<usize> {
    let mut c = (*cur).min(items.len());
    if c == 0 || key(&items[c - 1]) >= t {
        c = items.partition_point(|x| key(x) < t);
    } else {
        let mut steps = 0;
        while c < items.len() && key(&items[c]) < t {
            c += 1;
            steps += 1;
            if steps == 8 {
                c += items[c..].partition_point(|x| key(x) < t);
                break;
            }
        }
    }
    *cur = c;
    (c < items.len()).then_some(c)
}

/// One row of an entity's series.
#[derive(Clone, Copy)]
pub(super) struct Row {
    pub(super) ts: i64,
    pub(super) interval: Option<i64>,
    pub(super) mem: f64,
    pub(super) act: Option<f64>,
    pub(super) src: Option<&'static str>,
    pub(super) whole: Option<f64>,
}

/// An entity's identity while its rows are collected.
pub(super) struct Ent {
    sort_key: [String; 7],
    pub(super) entity: Entity,
    pub(super) profile: Option<String>,
    pub(super) rows: Vec<Row>,
}

/// The first present of the process's SM, its MIG instance's SM, the GPU's SM, the GPU's busy.
fn first_present(c: [(Option<f64>, &'static str); 4]) -> (Option<f64>, Option<&'static str>) {
    c.into_iter()
        .find(|(v, _)| v.is_some())
        .map_or((None, None), |(v, s)| (v, Some(s)))
}

fn sort_key(
    kind: &str,
    node: &str,
    uuid: &str,
    gi: Option<i64>,
    pid: Option<i64>,
    process: Option<&str>,
    pod: Option<&str>,
) -> [String; 7] {
    [
        kind.to_string(),
        node.to_string(),
        uuid.to_string(),
        gi.map(|g| g.to_string()).unwrap_or_default(),
        pid.map(|p| p.to_string()).unwrap_or_default(),
        process.unwrap_or("").to_string(),
        pod.unwrap_or("").to_string(),
    ]
}

fn some(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

/// Every entity of one partition with its rows (sorted by `ts`), in key order.
///
/// Rows are matched in Rust, not by joins on string keys: GPUs are interned as small ids (rows
/// keyed by their strings' arrow views, strings read once per view), each GPU's and MIG
/// instance's rows are kept sorted by `ts`, and each process walks them with a forward cursor.
/// The GPUs `(node, uuid)` of the partition's GPU and process rows, and how many of them have
/// no memory-used value in any of those rows: what the detector cannot judge.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct MemoryCover {
    pub(super) gpus: usize,
    pub(super) without: usize,
}

/// [`MemoryCover`] from the rows `entities` already grouped: each GPU's rows, each process
/// entity's rows and GPU.
fn memory_cover(g: &GpuCols, gpus: &GpuSeries, p: &ProcCols, procs: &Procs) -> MemoryCover {
    let n = gpus.series.len();
    let (mut seen, mut has) = (vec![false; n], vec![false; n]);
    for (id, rows) in gpus.series.iter().enumerate() {
        seen[id] = !rows.is_empty();
        has[id] = rows.iter().any(|&(_, i)| g.mem.get(i).is_some());
    }
    let mut ent_has = vec![false; procs.procs.len()];
    for (i, &e) in procs.ent_of.iter().enumerate() {
        if p.mem.get(i).is_some() {
            ent_has[e as usize] = true;
        }
    }
    // Processes on a GPU without GPU rows: keyed by their own (node, uuid).
    let mut others: HashMap<(Option<&str>, Option<&str>), bool> = HashMap::default();
    for (e, pr) in procs.procs.iter().enumerate() {
        match pr.id.map(|id| id as usize).filter(|&id| id < n) {
            Some(id) => {
                seen[id] = true;
                has[id] |= ent_has[e];
            }
            None => {
                let ent = &procs.ents[e].entity;
                *others
                    .entry((ent.node.as_deref(), ent.uuid.as_deref()))
                    .or_default() |= ent_has[e];
            }
        }
    }
    let known = (0..n).filter(|&id| seen[id]);
    MemoryCover {
        gpus: known.clone().count() + others.len(),
        without: known.filter(|&id| !has[id]).count() + others.values().filter(|h| !**h).count(),
    }
}

pub(super) fn entities(frames: &Frames) -> Result<(Vec<Ent>, MemoryCover), AdvisorError> {
    let (gdf, mdf, pdf) = (
        gpu_frame(frames)?,
        mig_frame(frames)?,
        process_frame(frames)?,
    );
    let (g, m, p) = (GpuCols::of(&gdf)?, MigCols::of(&mdf)?, ProcCols::of(&pdf)?);
    let mut ids = GpuIds::default();
    let gpus = GpuSeries::of(&g, &mut ids);
    let mig = Instances::of(&m, &mut ids);
    let mut procs = process_entities(&p, &ids, &gpus, &mig);
    process_rows(&mut procs, &p, &g, &gpus, &mig);
    let cover = memory_cover(&g, &gpus, &p, &procs);
    let with_proc: HashSet<u32> = procs.procs.iter().filter_map(|p| p.id).collect();
    let gis_with_proc: HashSet<usize> = procs.procs.iter().filter_map(|p| p.inst).collect();
    let mut out = procs.ents;
    mig_entities(&mut out, &ids, &gpus, &mig, &gis_with_proc);
    gpu_entities(&mut out, &g, &gpus, &with_proc);
    out.sort_by(|a, b| a.sort_key.cmp(&b.sort_key));
    for e in &mut out {
        if !e.rows.windows(2).all(|w| w[0].ts <= w[1].ts) {
            e.rows.sort_by_key(|r| r.ts);
        }
    }
    Ok((out, cover))
}

/// GPU rows: each GPU's `(ts, row)`, sorted by ts (stable: the first row of a ts wins), and
/// each GPU's first model.
struct GpuSeries {
    series: Vec<Vec<(i64, usize)>>,
    model_of: HashMap<u32, String>,
}

impl GpuSeries {
    fn of<'a>(g: &'a GpuCols, ids: &mut GpuIds<'a>) -> GpuSeries {
        let mut series: Vec<Vec<(i64, usize)>> = Vec::new();
        let mut model_of: HashMap<u32, String> = HashMap::default();
        let (gv_node, gv_uuid) = (g.node.ids(), g.uuid.ids());
        // A GPU without a node (an nvidia-smi log names none) is keyed by an empty node.
        let mut by_view: HashMap<(Option<u32>, u32), u32> = HashMap::default();
        for i in 0..g.height {
            let (vn, Some(vu), Some(t)) = (gv_node.at(i), gv_uuid.at(i), g.ts.get(i)) else {
                continue;
            };
            let id = match by_view.get(&(vn, vu)) {
                Some(&id) => id,
                None => {
                    let id = ids.id(g.node.get(i).unwrap_or(""), g.uuid.get(i).unwrap_or(""));
                    by_view.insert((vn, vu), id);
                    id
                }
            };
            if series.len() <= id as usize {
                series.resize_with(id as usize + 1, Vec::new);
            }
            series[id as usize].push((t, i));
            if let Some(m) = g.model.get(i) {
                model_of.entry(id).or_insert_with(|| m.to_string());
            }
        }
        for s in &mut series {
            if !s.windows(2).all(|w| w[0].0 <= w[1].0) {
                s.sort_by_key(|x| x.0);
            }
        }
        GpuSeries { series, model_of }
    }
}

/// MIG rows, combined per instance and ts (SM: max; memory: sum), and the instance of each
/// `(GPU id, GPU instance)`.
struct Instances {
    instances: Vec<Instance>,
    inst_of: HashMap<(u32, Option<i64>), usize>,
}

impl Instances {
    fn of<'a>(m: &'a MigCols, ids: &mut GpuIds<'a>) -> Instances {
        let mut instances: Vec<Instance> = Vec::new();
        let mut inst_of: HashMap<(u32, Option<i64>), usize> = HashMap::default();
        let (mv_node, mv_uuid) = (m.node.ids(), m.uuid.ids());
        let mut by_view: HashMap<(Option<u32>, u32, Option<i64>), usize> = HashMap::default();
        for i in 0..m.height {
            let (vn, Some(vu), Some(t)) = (mv_node.at(i), mv_uuid.at(i), m.ts.get(i)) else {
                continue;
            };
            let gi = m.gi.get(i);
            let k = match by_view.get(&(vn, vu, gi)) {
                Some(&k) => k,
                None => {
                    let id = ids.id(m.node.get(i).unwrap_or(""), m.uuid.get(i).unwrap_or(""));
                    let k = *inst_of.entry((id, gi)).or_insert_with(|| {
                        instances.push(Instance {
                            id,
                            gi,
                            mig_uuid: None,
                            profile: None,
                            at: Vec::new(),
                            sorted: true,
                        });
                        instances.len() - 1
                    });
                    by_view.insert((vn, vu, gi), k);
                    k
                }
            };
            let inst = &mut instances[k];
            if inst.mig_uuid.is_none() {
                inst.mig_uuid = m.mig_uuid.get(i).map(str::to_string);
            }
            if inst.profile.is_none() {
                inst.profile = m.profile.get(i).map(str::to_string);
            }
            inst.push(MigAt {
                ts: t,
                sm: m.sm.get(i),
                mem: m.mem.get(i).unwrap_or(0.0),
                gpu: m.gpu.get(i),
                interval: m.iv.get(i),
            });
        }
        for inst in &mut instances {
            inst.finish();
        }
        Instances { instances, inst_of }
    }
}

/// A process entity's GPU id, MIG instance, and cursors into their rows.
struct Proc {
    id: Option<u32>,
    inst: Option<usize>,
    gcur: usize,
    mcur: usize,
}

/// The process entities in order of first appearance (`procs[e]` is `ents[e]`'s), each process
/// row's entity, and each entity's row count.
struct Procs {
    procs: Vec<Proc>,
    ents: Vec<Ent>,
    ent_of: Vec<u32>,
    counts: Vec<usize>,
}

/// A process entity's key. A pod is part of a process's identity: pid-less rows
/// (dcgm-exporter's pod-labelled series) of pods that follow each other on one GPU are
/// different workloads.
type PKey<'a> = (
    &'a str,
    &'a str,
    Option<i64>,
    Option<i64>,
    Option<&'a str>,
    Option<&'a str>,
);

/// Entity index by (string ids of node, uuid, process, pod; instance; pid): strings are read
/// only the first time a combination is seen.
type VKey = (
    Option<u32>,
    Option<u32>,
    Option<i64>,
    Option<i64>,
    Option<u32>,
    Option<u32>,
);

/// Processes, first of two passes: each row's entity (and the row counts).
fn process_entities(p: &ProcCols, ids: &GpuIds, gpus: &GpuSeries, mig: &Instances) -> Procs {
    let mut out = Procs {
        procs: Vec::new(),
        ents: Vec::new(),
        ent_of: Vec::with_capacity(p.height),
        counts: Vec::new(),
    };
    let mut proc_index: HashMap<PKey, usize> = HashMap::default();
    let mut by_view: HashMap<VKey, usize> = HashMap::default();
    let (pv_node, pv_uuid, pv_proc, pv_pod) =
        (p.node.ids(), p.uuid.ids(), p.proc.ids(), p.pod.ids());
    for i in 0..p.height {
        let gi = p.gi.get(i);
        let vk: VKey = (
            pv_node.at(i),
            pv_uuid.at(i),
            gi,
            p.pid.get(i),
            pv_proc.at(i),
            pv_pod.at(i),
        );
        let e = match by_view.get(&vk) {
            Some(&e) => e,
            None => {
                let n = p.node.get(i).unwrap_or("");
                let u = p.uuid.get(i).unwrap_or("");
                let k: PKey = (n, u, gi, p.pid.get(i), p.proc.get(i), p.pod.get(i));
                let e = *proc_index
                    .entry(k)
                    .or_insert_with(|| out.add(p, i, k, ids, gpus, mig));
                by_view.insert(vk, e);
                e
            }
        };
        out.ent_of.push(e as u32);
        if p.ts.get(i).is_some() {
            out.counts[e] += 1;
        }
    }
    out
}

impl Procs {
    /// Adds the process entity of key `k`, first seen at process row `i`; returns its index.
    fn add(
        &mut self,
        p: &ProcCols,
        i: usize,
        k: PKey,
        ids: &GpuIds,
        gpus: &GpuSeries,
        mig: &Instances,
    ) -> usize {
        let (n, u, gi) = (k.0, k.1, k.2);
        let id = ids.get(n, u);
        let inst = id.and_then(|id| mig.inst_of.get(&(id, gi)).copied());
        let instance = inst.map(|k| &mig.instances[k]);
        self.procs.push(Proc {
            id,
            inst,
            gcur: 0,
            mcur: 0,
        });
        self.counts.push(0);
        self.ents.push(Ent {
            sort_key: sort_key("process", n, u, gi, k.3, k.4, k.5),
            entity: Entity {
                kind: "process".into(),
                node: some(n),
                gpu: p.gpu.get(i).map(|g| g as u32),
                uuid: some(u),
                model: id.and_then(|id| gpus.model_of.get(&id).cloned()),
                mig_uuid: instance.and_then(|x| x.mig_uuid.clone()),
                gpu_instance: gi.map(|g| g as u32),
                pid: k.3.map(|p| p as u32),
                process: k.4.and_then(some),
                namespace: p.ns.get(i).and_then(some),
                pod: p.pod.get(i).and_then(some),
                slurm_job: p.job.get(i).and_then(some),
            },
            profile: instance.and_then(|x| x.profile.clone()),
            rows: Vec::new(),
        });
        self.ents.len() - 1
    }
}

/// Processes, second pass: each process row with its activity, matched to its GPU's and MIG
/// instance's rows.
fn process_rows(procs: &mut Procs, p: &ProcCols, g: &GpuCols, gpus: &GpuSeries, mig: &Instances) {
    for (e, n) in procs.counts.iter().enumerate() {
        procs.ents[e].rows.reserve_exact(*n);
    }
    for (i, &e) in procs.ent_of.iter().enumerate() {
        let Some(t) = p.ts.get(i) else { continue };
        let e = e as usize;
        let pr = &mut procs.procs[e];
        // The GPU's and the MIG instance's rows whose interval covers the process row's end
        // (the same row when both come at one period).
        let g_row = pr.id.and_then(|id| {
            let s = gpus.series.get(id as usize)?;
            seek(s, |x| x.0, &mut pr.gcur, t)
                .filter(|&k| s[k].0 == t || s[k].0 - g.iv.get(s[k].1).unwrap_or(0) < t)
                .map(|k| s[k].1)
        });
        let at_mig = pr.inst.and_then(|k| {
            let at = &mig.instances[k].at;
            seek(at, |m| m.ts, &mut pr.mcur, t)
                .filter(|&j| at[j].ts == t || at[j].ts - at[j].interval.unwrap_or(0) < t)
                .map(|j| &at[j])
        });
        let [g_sm_v, g_busy_v] = g.act(g_row);
        let m_sm_v = (at_mig.and_then(|m| m.sm), "mig_sm_active");
        let (act, src) = first_present([(p.sm.get(i), "process_sm"), m_sm_v, g_sm_v, g_busy_v]);
        let (whole, _) = first_present([(None, ""), m_sm_v, g_sm_v, g_busy_v]);
        procs.ents[e].rows.push(Row {
            ts: t,
            interval: p.iv.get(i),
            mem: p.mem.get(i).unwrap_or(f64::NAN),
            act,
            src,
            whole,
        });
    }
}

/// MIG instances without process rows.
fn mig_entities(
    out: &mut Vec<Ent>,
    ids: &GpuIds,
    gpus: &GpuSeries,
    mig: &Instances,
    gis_with_proc: &HashSet<usize>,
) {
    let names: HashMap<u32, (&str, &str)> = ids.ids.iter().map(|(k, v)| (*v, *k)).collect();
    for (k, inst) in mig.instances.iter().enumerate() {
        if gis_with_proc.contains(&k) {
            continue;
        }
        let (n, u) = names[&inst.id];
        let rows = inst
            .at
            .iter()
            .map(|m| Row {
                ts: m.ts,
                interval: m.interval,
                mem: m.mem,
                act: m.sm,
                src: m.sm.map(|_| "mig_sm_active"),
                whole: m.sm,
            })
            .collect();
        out.push(Ent {
            sort_key: sort_key("mig", n, u, inst.gi, None, None, None),
            entity: Entity {
                kind: "mig".into(),
                node: some(n),
                gpu: inst.at.first().and_then(|m| m.gpu).map(|g| g as u32),
                uuid: some(u),
                model: gpus.model_of.get(&inst.id).cloned(),
                mig_uuid: inst.mig_uuid.clone(),
                gpu_instance: inst.gi.map(|g| g as u32),
                ..Entity::default()
            },
            profile: inst.profile.clone(),
            rows,
        });
    }
}

/// Whole GPUs outside MIG mode without process rows.
fn gpu_entities(out: &mut Vec<Ent>, g: &GpuCols, gpus: &GpuSeries, with_proc: &HashSet<u32>) {
    for (id, s) in gpus.series.iter().enumerate() {
        let id = id as u32;
        if with_proc.contains(&id) {
            continue;
        }
        let mut rows: Vec<Row> = Vec::with_capacity(s.len());
        let mut first: Option<usize> = None;
        for &(t, i) in s {
            if g.mig.get(i).unwrap_or(false) {
                continue;
            }
            first.get_or_insert(i);
            let (act, src) = first_present([
                (None, ""),
                (None, ""),
                (g.sm.get(i), "gpu_sm_active"),
                (g.busy.get(i), "gpu_busy"),
            ]);
            rows.push(Row {
                ts: t,
                interval: g.iv.get(i),
                mem: g.mem.get(i).unwrap_or(f64::NAN),
                act,
                src,
                whole: act,
            });
        }
        let Some(i) = first else { continue };
        let (n, u) = (g.node.get(i).unwrap_or(""), g.uuid.get(i).unwrap_or(""));
        out.push(Ent {
            sort_key: sort_key("gpu", n, u, None, None, None, None),
            entity: Entity {
                kind: "gpu".into(),
                node: some(n),
                gpu: g.gpu.get(i).map(|g| g as u32),
                uuid: some(u),
                model: gpus.model_of.get(&id).cloned(),
                ..Entity::default()
            },
            profile: None,
            rows,
        });
    }
}
