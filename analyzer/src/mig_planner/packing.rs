//! Packing a fleet: [`plan`] checks the inputs ([`prepare`]: each workload's smallest profile
//! per model), keeps the GPUs of work that has no other place, packs the rest (heuristic, then
//! the exact search when small), and turns the GPUs (bins) into fleet GPUs with placements
//! ([`materialize`]). Pure: no I/O.

use std::collections::{BTreeMap, BTreeSet};

use tessera_core::mig::{GpuModel, MigProfile};
use tessera_core::model::Placement;

use super::{
    Bin, FleetGpu, Kept, Method, ModelBound, PlannedGpu, PlannedInstance, PlannerError,
    PlannerOptions, Prepared, Proposal, Unplaceable, Workload, best_placement, exact, heuristic,
    is_whole_gpu, lower_bound, smallest_profile,
};

/// Check inputs and compute each workload's profile per model.
pub(crate) fn prepare<'a>(
    workloads: &'a [Workload],
    fleet: &[FleetGpu],
) -> Result<(Prepared<'a>, Vec<Unplaceable>, Vec<FleetGpu>), PlannerError> {
    let mut ids = std::collections::BTreeSet::new();
    for w in workloads {
        if !ids.insert(w.id.as_str()) {
            return Err(PlannerError::DuplicateWorkload(w.id.clone()));
        }
        if w.compute_slices == 0 {
            return Err(PlannerError::ZeroCompute { id: w.id.clone() });
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut models: Vec<&'static GpuModel> = Vec::new();
    let mut avail: Vec<Vec<usize>> = Vec::new();
    let mut non_mig = Vec::new();
    for (i, g) in fleet.iter().enumerate() {
        if !seen.insert((g.node.as_str(), g.index)) {
            return Err(PlannerError::DuplicateGpu {
                node: g.node.clone(),
                index: g.index,
            });
        }
        match g.mig_model() {
            Some(m) => match models.iter().position(|x| x.key == m.key) {
                Some(k) => avail[k].push(i),
                None => {
                    models.push(m);
                    avail.push(vec![i]);
                }
            },
            None => non_mig.push(g.clone()),
        }
    }
    let need: Vec<Vec<Option<usize>>> = workloads
        .iter()
        .map(|w| {
            models
                .iter()
                .map(|m| smallest_profile(m, w.memory_bytes, w.compute_slices))
                .collect()
        })
        .collect();
    let mut unplaceable = Vec::new();
    let mut placeable = Vec::new();
    for (i, w) in workloads.iter().enumerate() {
        if need[i].iter().any(Option::is_some) {
            placeable.push(i);
            continue;
        }
        let reason = if models.is_empty() {
            "the fleet has no GPU of a MIG-capable model tessera knows".to_string()
        } else {
            let largest: Vec<String> = models
                .iter()
                .filter_map(|m| {
                    m.profiles
                        .iter()
                        .max_by_key(|p| p.memory_bytes)
                        .map(|p| format!("{} {} ({} slices)", m.key, p.name, p.compute_slices))
                })
                .collect();
            format!(
                "needs {:.1} GiB and {} compute slices; no profile holds that (largest: {})",
                w.memory_bytes as f64 / (1u64 << 30) as f64,
                w.compute_slices,
                largest.join(", ")
            )
        };
        unplaceable.push(Unplaceable {
            workload: i,
            id: w.id.clone(),
            reason,
        });
    }
    let current_model = workloads
        .iter()
        .map(|w| {
            let uuid = w.current_gpu.as_deref()?;
            avail
                .iter()
                .position(|gs| gs.iter().any(|&g| fleet[g].uuid.as_deref() == Some(uuid)))
        })
        .collect();
    Ok((
        Prepared {
            models,
            avail,
            need,
            placeable,
            workloads,
            current_model,
        },
        unplaceable,
        non_mig,
    ))
}

/// Leaves the kept GPUs and their workloads out of `p`: of all the GPUs available and all the
/// workloads placeable, those not kept.
fn leave_out_kept(
    p: &mut Prepared,
    (all_avail, all_placeable): (&[Vec<usize>], &[usize]),
    kept: &BTreeMap<usize, Vec<(usize, String)>>,
) {
    let kept_ws: BTreeSet<usize> = kept.values().flatten().map(|(w, _)| *w).collect();
    p.avail = all_avail
        .iter()
        .map(|gs| {
            gs.iter()
                .copied()
                .filter(|g| !kept.contains_key(g))
                .collect()
        })
        .collect();
    p.placeable = all_placeable
        .iter()
        .copied()
        .filter(|w| !kept_ws.contains(w))
        .collect();
}

/// Tries the exact search when the heuristic placed every workload and they are few enough
/// (not with `heuristic_only`): its bins replace the heuristic's when it finds fewer; the method
/// that made the plan.
fn search_exactly(
    p: &Prepared,
    bins: &mut Vec<Bin>,
    left: &[usize],
    opts: &PlannerOptions,
) -> Method {
    let mut method = Method::Heuristic;
    let placed: Vec<usize> = p
        .placeable
        .iter()
        .copied()
        .filter(|w| !left.contains(w))
        .collect();
    if !opts.heuristic_only && left.is_empty() && placed.len() <= opts.exact_max_workloads {
        let lb = lower_bound(p, &placed);
        if bins.len() as u32 <= lb {
            method = Method::Exact;
        } else {
            let (found, complete) = exact::search(p, &placed, bins.len(), opts.exact_node_limit);
            if let Some(b) = found {
                *bins = b;
            }
            method = if complete {
                Method::Exact
            } else {
                Method::ExactIncomplete
            };
        }
    }
    method
}

/// Each kept GPU whole, MIG off, its workloads on it, into `gpus`; the kept workloads with
/// why.
fn kept_gpus(
    workloads: &[Workload],
    fleet: &[FleetGpu],
    kept: &BTreeMap<usize, Vec<(usize, String)>>,
    gpus: &mut Vec<PlannedGpu>,
) -> Vec<Kept> {
    let mut kept_list = Vec::new();
    for (&g, ws) in kept {
        let gpu = &fleet[g];
        let Some(model) = gpu.mig_model() else {
            continue; // not expected: kept GPUs come from the MIG-capable ones
        };
        let full = model
            .profiles
            .iter()
            .filter(|pr| !pr.media_extensions)
            .find(|pr| {
                pr.compute_slices == model.compute_slices && pr.memory_slices == model.memory_slots
            })
            .or_else(|| model.profiles.iter().max_by_key(|pr| pr.memory_bytes));
        let instances = full
            .map(|pr| PlannedInstance {
                profile_id: pr.id,
                profile: pr.name.clone(),
                placement: Placement {
                    start: 0,
                    size: pr.memory_slices,
                },
                workloads: ws.iter().map(|(w, _)| *w).collect(),
            })
            .into_iter()
            .collect();
        gpus.push(PlannedGpu {
            gpu: gpu.clone(),
            model: model.key,
            instances,
            mig_enabled: false,
            kept: true,
        });
        for (w, reason) in ws {
            kept_list.push(Kept {
                workload: *w,
                id: workloads[*w].id.clone(),
                node: gpu.node.clone(),
                index: gpu.index,
                reason: reason.clone(),
            });
        }
    }
    kept_list
}

/// The fleet's MIG-capable GPUs the plan leaves free.
fn free_gpus(all_avail: &[Vec<usize>], fleet: &[FleetGpu], gpus: &[PlannedGpu]) -> Vec<FleetGpu> {
    let used_fleet: BTreeSet<(String, u32)> = gpus
        .iter()
        .map(|g| (g.gpu.node.clone(), g.gpu.index))
        .collect();
    all_avail
        .iter()
        .flatten()
        .map(|&i| fleet[i].clone())
        .filter(|g| !used_fleet.contains(&(g.node.clone(), g.index)))
        .collect()
}

/// Per model with bins: its workloads, memory and compute slices, the lower bound they imply and
/// the GPUs used.
fn model_bounds(p: &Prepared, bins: &[Bin]) -> Vec<ModelBound> {
    p.models
        .iter()
        .enumerate()
        .filter_map(|(m, model)| {
            let mine: Vec<&Bin> = bins.iter().filter(|b| b.model == m).collect();
            if mine.is_empty() {
                return None;
            }
            let slots: u32 = mine.iter().map(|b| b.slots).sum();
            let compute: u32 = mine.iter().map(|b| b.compute).sum();
            Some(ModelBound {
                model: model.key,
                workloads: mine.iter().map(|b| b.workloads.len()).sum(),
                memory_slices: slots,
                compute_slices: compute,
                lower_bound: slots
                    .div_ceil(model.memory_slots)
                    .max(compute.div_ceil(model.compute_slices)),
                gpus_used: mine.len() as u32,
            })
        })
        .collect()
}

/// Plan `workloads` onto `fleet`: the proposed layouts.
///
/// Work keeps the GPU it has when the plan gives it no other place: a workload that no MIG
/// profile holds (its need with headroom is more than the largest instance: it runs on the whole
/// GPU today) and a workload for which no GPU has room left keep the MIG-capable GPU they run on
/// now, whole and MIG off ([`Proposal::kept`]); that GPU is taken out of the packing, which is
/// repeated until no workload is left over that has a GPU to keep. Only workloads with no known
/// GPU of a MIG-capable model are [`Proposal::unplaceable`].
pub fn plan(
    workloads: &[Workload],
    fleet: &[FleetGpu],
    opts: &PlannerOptions,
) -> Result<Proposal, PlannerError> {
    let (mut p, size_unplaceable, non_mig) = prepare(workloads, fleet)?;
    let all_avail = p.avail.clone();
    let all_placeable = p.placeable.clone();
    // The MIG-capable fleet GPU (index into `fleet`) workload w runs on now.
    let gpu_of = |w: usize| -> Option<usize> {
        let uuid = workloads[w].current_gpu.as_deref()?;
        all_avail
            .iter()
            .flatten()
            .copied()
            .find(|&g| fleet[g].uuid.as_deref() == Some(uuid))
    };
    // Fleet GPU -> the workloads that keep it, with why.
    let mut kept: BTreeMap<usize, Vec<(usize, String)>> = BTreeMap::new();
    let mut unplaceable = Vec::new();
    for u in size_unplaceable {
        match gpu_of(u.workload) {
            Some(g) => kept.entry(g).or_default().push((
                u.workload,
                format!(
                    "{}; it runs on that GPU today",
                    u.reason.replace(
                        "; no profile holds that",
                        ", more than any MIG instance holds"
                    )
                ),
            )),
            None => unplaceable.push(u),
        }
    }
    let (mut bins, mut left) = loop {
        leave_out_kept(&mut p, (&all_avail, &all_placeable), &kept);
        let (bins, left) = heuristic::pack(&p);
        let mut more = false;
        for &w in &left {
            if let Some(g) = gpu_of(w) {
                kept.entry(g).or_default().push((
                    w,
                    "every other GPU that could hold it is full; it runs on that GPU today".into(),
                ));
                more = true;
            }
        }
        if !more {
            break (bins, left);
        }
    };
    let method = search_exactly(&p, &mut bins, &left, opts);
    left.sort_unstable();
    for w in left {
        unplaceable.push(Unplaceable {
            workload: w,
            id: workloads[w].id.clone(),
            reason: "every GPU of the fleet that could hold it is full".into(),
        });
    }
    let placed: Vec<usize> = bins.iter().flat_map(|b| b.workloads.clone()).collect();
    let mut gpus = materialize(&p, fleet, &bins);
    // Never drop a workload silently, even if a bin found no GPU or placement (not expected: the
    // searches only build bins that fit and never open more GPUs of a model than it has).
    let in_gpus: BTreeSet<usize> = gpus
        .iter()
        .flat_map(|g| g.instances.iter().flat_map(|i| i.workloads.iter().copied()))
        .collect();
    for &w in &placed {
        if !in_gpus.contains(&w) {
            unplaceable.push(Unplaceable {
                workload: w,
                id: workloads[w].id.clone(),
                reason: "internal: its planned GPU found no legal placement".into(),
            });
        }
    }
    unplaceable.sort_by_key(|u| u.workload);
    let placed: Vec<usize> = placed.into_iter().filter(|w| in_gpus.contains(w)).collect();
    let lower_bound = lower_bound(&p, &placed) + kept.len() as u32;
    // The kept GPUs: whole, MIG off, their workloads on them.
    let mut kept_list = kept_gpus(workloads, fleet, &kept, &mut gpus);
    kept_list.sort_by_key(|k| k.workload);
    gpus.sort_by(|a, b| (&a.gpu.node, a.gpu.index).cmp(&(&b.gpu.node, b.gpu.index)));
    let free_gpus = free_gpus(&all_avail, fleet, &gpus);
    let per_model = model_bounds(&p, &bins);
    Ok(Proposal {
        gpus_used: gpus.len() as u32,
        gpus,
        free_gpus,
        unplaceable,
        kept: kept_list,
        non_mig_gpus: non_mig,
        lower_bound,
        per_model,
        method,
    })
}

/// Turn bins into fleet GPUs with placements. A bin goes preferably to the GPU most of its
/// workloads run on now, then to a GPU on the node most of them run on, then to any free one.
fn materialize(p: &Prepared, fleet: &[FleetGpu], bins: &[Bin]) -> Vec<PlannedGpu> {
    let mut taken = vec![false; fleet.len()];
    let mut chosen: Vec<Option<usize>> = vec![None; bins.len()];
    // Pass 0: current GPU (by UUID, or by node+index is not known: UUID only). Pass 1: node.
    for pass in 0..3 {
        for (b, bin) in bins.iter().enumerate() {
            if chosen[b].is_some() {
                continue;
            }
            let mut best: Option<(usize, usize)> = None;
            for &g in &p.avail[bin.model] {
                if taken[g] {
                    continue;
                }
                let gpu = &fleet[g];
                let votes = bin
                    .workloads
                    .iter()
                    .filter(|&&w| {
                        let wl = &p.workloads[w];
                        match pass {
                            0 => gpu.uuid.is_some() && wl.current_gpu == gpu.uuid,
                            1 => wl.node.as_deref() == Some(gpu.node.as_str()),
                            _ => true,
                        }
                    })
                    .count();
                if votes > 0 && best.is_none_or(|(v, _)| votes > v) {
                    best = Some((votes, g));
                }
                if pass == 2 && best.is_some() {
                    break;
                }
            }
            if let Some((_, g)) = best {
                taken[g] = true;
                chosen[b] = Some(g);
            }
        }
    }
    let mut out: Vec<PlannedGpu> = bins
        .iter()
        .zip(chosen)
        .filter_map(|(bin, g)| {
            let g = g?;
            let model = p.models[bin.model];
            let profs: Vec<&MigProfile> = bin
                .workloads
                .iter()
                .filter_map(|&w| p.profile(w, bin.model))
                .collect();
            let starts = best_placement(model, &profs)?;
            let mut instances: Vec<PlannedInstance> = bin
                .workloads
                .iter()
                .zip(profs.iter().zip(starts))
                .map(|(&w, (prof, start))| PlannedInstance {
                    profile_id: prof.id,
                    profile: prof.name.clone(),
                    placement: Placement {
                        start,
                        size: prof.memory_slices,
                    },
                    workloads: vec![w],
                })
                .collect();
            // Largest first: the order a driver should create them in.
            instances.sort_by_key(|i| (std::cmp::Reverse(i.placement.size), i.placement.start));
            Some(PlannedGpu {
                gpu: fleet[g].clone(),
                model: model.key,
                instances,
                mig_enabled: !is_whole_gpu(model, &profs),
                kept: false,
            })
        })
        .collect();
    out.sort_by(|a, b| (&a.gpu.node, a.gpu.index).cmp(&(&b.gpu.node, b.gpu.index)));
    out
}
