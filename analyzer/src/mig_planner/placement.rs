//! Where a GPU's instances go: the legal placement of a set of MIG profiles on one GPU model,
//! searched over the model's placement table (largest first, counts and the one `+me` checked).
//! [`first_placement`] is the first legal one; [`best_placement`] the one that keeps the largest
//! free ranges. Pure; knows nothing of workloads or the fleet.

use tessera_core::mig::{GpuModel, MigProfile};

/// Order profiles for the placement search: largest first, equal profiles adjacent.
pub(super) fn order(profs: &[&MigProfile]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..profs.len()).collect();
    idx.sort_by_key(|&i| {
        (
            std::cmp::Reverse(profs[i].memory_slices),
            profs[i].placement_starts.len(),
            profs[i].id,
        )
    });
    idx
}

/// Count and compute checks that don't depend on placements.
pub(super) fn counts_ok(model: &GpuModel, profs: &[&MigProfile]) -> bool {
    let compute: u32 = profs.iter().map(|p| p.compute_slices).sum();
    let slots: u32 = profs.iter().map(|p| p.memory_slices).sum();
    if compute > model.compute_slices || slots > model.memory_slots {
        return false;
    }
    model
        .profiles
        .iter()
        .all(|q| profs.iter().filter(|p| p.id == q.id).count() as u32 <= q.max_count)
}

/// Depth-first search over legal starts; equal profiles take increasing starts (no symmetric
/// repeats). Calls `visit` with each complete assignment; stops when it returns true.
pub(super) fn search(
    profs: &[&MigProfile],
    ord: &[usize],
    k: usize,
    used: u32,
    starts: &mut [u32],
    visit: &mut dyn FnMut(&[u32], u32) -> bool,
) -> bool {
    if k == ord.len() {
        return visit(starts, used);
    }
    let i = ord[k];
    let p = profs[i];
    let min_start = if k > 0 && profs[ord[k - 1]].id == p.id {
        starts[ord[k - 1]] + 1
    } else {
        0
    };
    for &s in &p.placement_starts {
        if s < min_start {
            continue;
        }
        let mask = ((1u32 << p.memory_slices) - 1) << s;
        if used & mask != 0 {
            continue;
        }
        starts[i] = s;
        if search(profs, ord, k + 1, used | mask, starts, visit) {
            return true;
        }
    }
    false
}

/// Any legal placement of these profiles on `model` (in input order), if one exists.
pub fn first_placement(model: &GpuModel, profs: &[&MigProfile]) -> Option<Vec<u32>> {
    if !counts_ok(model, profs) {
        return None;
    }
    let ord = order(profs);
    let mut starts = vec![0; profs.len()];
    let mut found = None;
    search(profs, &ord, 0, 0, &mut starts, &mut |s, _| {
        found = Some(s.to_vec());
        true
    });
    found
}

/// Fragmentation score of an occupied-slot mask (higher is better): the largest profile that
/// could still be added (in memory slices), then the sum of squared free runs.
pub(super) fn free_score(model: &GpuModel, used: u32, profs: &[&MigProfile]) -> (u32, u32) {
    let mut largest = 0;
    for q in model.profiles.iter().filter(|q| !q.media_extensions) {
        let count = profs.iter().filter(|p| p.id == q.id).count() as u32;
        let compute: u32 = profs.iter().map(|p| p.compute_slices).sum();
        if count >= q.max_count || compute + q.compute_slices > model.compute_slices {
            continue;
        }
        let mask0 = (1u32 << q.memory_slices) - 1;
        if q.placement_starts.iter().any(|&s| used & (mask0 << s) == 0) {
            largest = largest.max(q.memory_slices);
        }
    }
    let mut sq = 0;
    let mut run = 0;
    for s in 0..=model.memory_slots {
        if s < model.memory_slots && used & (1 << s) == 0 {
            run += 1;
        } else {
            sq += run * run;
            run = 0;
        }
    }
    (largest, sq)
}

/// The legal placement of these profiles on `model` that keeps the most usable free space
/// (largest addable profile, then largest contiguous free runs); ties keep the first found.
pub fn best_placement(model: &GpuModel, profs: &[&MigProfile]) -> Option<Vec<u32>> {
    if !counts_ok(model, profs) {
        return None;
    }
    let ord = order(profs);
    let mut starts = vec![0; profs.len()];
    let mut best: Option<((u32, u32), Vec<u32>)> = None;
    search(profs, &ord, 0, 0, &mut starts, &mut |s, used| {
        let score = free_score(model, used, profs);
        if best.as_ref().is_none_or(|(b, _)| score > *b) {
            best = Some((score, s.to_vec()));
        }
        false
    });
    best.map(|(_, s)| s)
}
