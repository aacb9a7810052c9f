//! Judging while the partitions are read ([`Stream`]). `ingest_parts` keeps all of a node's
//! rows in one partition, so once a partition is read the workloads on its nodes are complete:
//! each placement is judged as soon as all its workloads (and its GPU's node) are, each
//! workload's own figures and work are taken once no placement still needs it, and its rows are
//! dropped. A replay thus holds the rows of about one partition at a time (plus those of
//! placements that span partitions not yet read) instead of every row of the range; the figures
//! are the ones judging everything at the end gives. A node met in a second partition (not
//! something `ingest_parts` makes) is refused rather than judged from part of its rows.
//!
//! Pure: no I/O; the model itself is [`super::combine`]'s.

use std::collections::BTreeSet;

use tessera_core::mig::plan_sections::WorkloadSource;

use super::combine;
use super::series::{self, Extracted, Point};
use super::targets::Targets;
use super::{PlacementResult, Replay, ReplayError, ReplayRequest, WorkloadResult};
use crate::frames::columns::FastMap;

/// A replay under way: what is judged so far.
pub struct Stream<'a> {
    t: &'a Targets,
    /// The plan's workloads by index (the order of `Targets::sources`).
    sources: Vec<(&'a str, &'a WorkloadSource)>,
    /// Each target's workloads, by index.
    members: Vec<Vec<usize>>,
    /// Nodes whose partition has been read.
    done: BTreeSet<String>,
    /// Per workload: its rows are complete and in time order.
    complete: Vec<bool>,
    /// Per workload: the placements not yet judged that hold it.
    left: Vec<usize>,
    /// Per workload: some placement holds it (its work counts).
    placed: Vec<bool>,
    /// Per workload: it is judged against the configs in force (a `workloads` entry of a plan
    /// with configs, placed by some config or not).
    in_configs: Vec<bool>,
    placements: Vec<Option<(PlacementResult, f64)>>,
    workloads: Vec<Option<WorkloadResult>>,
    work: Vec<Option<f64>>,
}

impl<'a> Stream<'a> {
    pub fn new(t: &'a Targets) -> Stream<'a> {
        let sources: Vec<(&str, &WorkloadSource)> =
            t.sources.iter().map(|(id, s)| (id.as_str(), s)).collect();
        let index: FastMap<&str, usize> = sources
            .iter()
            .enumerate()
            .map(|(i, (id, _))| (*id, i))
            .collect();
        let n = sources.len();
        let members: Vec<Vec<usize>> = t
            .targets
            .iter()
            .map(|tg| {
                tg.members
                    .iter()
                    .filter_map(|m| index.get(m.as_str()).copied())
                    .collect()
            })
            .collect();
        let mut left = vec![0; n];
        for &i in members.iter().flatten() {
            left[i] += 1;
        }
        // Every workload of the `workloads` section is judged against the configs in force, also
        // one that no config places: its memory has nowhere to go (failed intervals, `unsafe`).
        let in_configs: Vec<bool> = sources
            .iter()
            .map(|(id, _)| {
                !t.configs.is_empty()
                    && t.source_items
                        .get(*id)
                        .is_some_and(|item| item.starts_with("workloads."))
            })
            .collect();
        Stream {
            t,
            sources,
            placed: left.iter().map(|&l| l > 0).collect(),
            members,
            done: BTreeSet::new(),
            complete: vec![false; n],
            left,
            in_configs,
            placements: vec![None; t.targets.len()],
            workloads: vec![None; n],
            work: vec![None; n],
        }
    }

    /// After a partition was read into `ex`: `nodes` are the nodes it held.
    pub fn partition(
        &mut self,
        ex: &mut Extracted,
        nodes: BTreeSet<String>,
    ) -> Result<(), ReplayError> {
        if let Some(n) = nodes.iter().find(|n| self.done.contains(*n)) {
            return Err(ReplayError::Plan(format!(
                "the rows of node {n} are in more than one partition of the sources; replay reads each node from one partition (a tessera bug: please report it)"
            )));
        }
        self.done.extend(nodes);
        self.settle(ex, false);
        Ok(())
    }

    /// Judges what is complete (with `all`, everything: no partition is left).
    fn settle(&mut self, ex: &mut Extracted, all: bool) {
        for (i, (_, s)) in self.sources.iter().enumerate() {
            if !self.complete[i] && (all || self.done.contains(&s.node)) {
                series::finish(&mut ex.series[i]);
                self.complete[i] = true;
            }
        }
        for (k, tg) in self.t.targets.iter().enumerate() {
            let ready = self.placements[k].is_none()
                && self.members[k].iter().all(|&i| self.complete[i])
                && (all || tg.node.as_ref().is_none_or(|n| self.done.contains(n)));
            if !ready {
                continue;
            }
            let rows: Vec<&[Point]> = self.members[k]
                .iter()
                .map(|&i| ex.series[i].as_slice())
                .collect();
            self.placements[k] = Some(combine::judge(tg, self.t, &rows, &ex.gpus));
            for &i in &self.members[k] {
                self.left[i] -= 1;
            }
        }
        for (i, &(id, s)) in self.sources.iter().enumerate() {
            if !self.complete[i] || self.left[i] > 0 || self.workloads[i].is_some() {
                continue;
            }
            let pts = std::mem::take(&mut ex.series[i]);
            self.workloads[i] = Some(combine::workload_result(
                self.t,
                id,
                s,
                &pts,
                self.in_configs[i],
            ));
            self.work[i] =
                (self.placed[i] && !pts.is_empty()).then(|| combine::work(&pts, ex.gpu_slices[i]));
        }
    }

    /// The whole replay, once every partition is read.
    pub fn finish(mut self, mut ex: Extracted, req: &ReplayRequest) -> Replay {
        self.settle(&mut ex, true);
        // The placed workloads' work, summed in the order of their ids.
        let work: f64 = self.work.iter().filter_map(|w| *w).sum();
        combine::replay(
            self.t,
            &ex,
            self.placements.into_iter().flatten().collect(),
            self.workloads.into_iter().flatten().collect(),
            work,
            req,
        )
    }
}
