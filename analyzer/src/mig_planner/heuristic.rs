//! Fast packing for large fleets: best-fit decreasing over legal placements, then a local
//! improvement that tries to empty the emptiest GPUs into the others.
//!
//! - Workloads go in decreasing order of their smallest GPU share (max of memory and compute
//!   share over the models available), larger memory first on ties.
//! - Each goes to the open GPU where it fits (a legal placement of all its instances exists) and
//!   leaves the least free share (memory + compute); ties prefer its current GPU, then its node.
//! - When none fits, a new GPU is opened of the model on which the workload's share is smallest
//!   (ties: the model of the GPU it runs on now, then the model with more GPUs left). No GPU left of any model that can hold it: the
//!   workload is returned as left over (the caller reports it).
//! - Improvement: repeatedly take the GPU with the fewest workloads and try to move all of them
//!   into the other GPUs (best fit); keep the move only when all fit.
//!
//! Also `first_fit_decreasing_by_memory`, the baseline the benchmark compares against.

use super::{Bin, Prepared};

fn size_key(p: &Prepared, w: usize) -> (f64, u64) {
    let (a, b) = p.min_fractions(w);
    (a.max(b), p.workloads[w].memory_bytes)
}

/// Pack the placeable workloads; returns the GPUs (bins) and the workloads left over.
pub(crate) fn pack(p: &Prepared) -> (Vec<Bin>, Vec<usize>) {
    let mut order = p.placeable.clone();
    order.sort_by(|&a, &b| {
        let (ka, kb) = (size_key(p, a), size_key(p, b));
        kb.0.total_cmp(&ka.0).then(kb.1.cmp(&ka.1)).then(a.cmp(&b))
    });
    let mut bins: Vec<Bin> = Vec::new();
    let mut left = Vec::new();
    for &w in &order {
        if !place_best_fit(p, &mut bins, w, None) && !open_new(p, &mut bins, w) {
            left.push(w);
        }
    }
    improve(p, &mut bins);
    (bins, left)
}

/// Put w into the best-fitting open bin (skipping `skip`); false if none fits.
fn place_best_fit(p: &Prepared, bins: &mut [Bin], w: usize, skip: Option<usize>) -> bool {
    let wl = &p.workloads[w];
    let mut best: Option<(f64, u8, usize)> = None;
    for (i, bin) in bins.iter().enumerate() {
        if Some(i) == skip || !bin.fits(p, w) {
            continue;
        }
        let (fm, fc) = p.fractions(w, bin.model).expect("fits");
        let left = bin.free_share(p) - fm - fc;
        // Prefer bins already holding workloads from the same node/GPU.
        let affinity = bin
            .workloads
            .iter()
            .map(|&o| {
                let ol = &p.workloads[o];
                if ol.current_gpu.is_some() && ol.current_gpu == wl.current_gpu {
                    0
                } else if ol.node.is_some() && ol.node == wl.node {
                    1
                } else {
                    2
                }
            })
            .min()
            .unwrap_or(2);
        let better = match best {
            None => true,
            Some((bl, ba, _)) => left < bl - 1e-9 || (left < bl + 1e-9 && affinity < ba),
        };
        if better {
            best = Some((left, affinity, i));
        }
    }
    match best {
        Some((_, _, i)) => {
            bins[i].add(p, w);
            true
        }
        None => false,
    }
}

/// Open a new GPU for w; false when no model with GPUs left can hold it.
fn open_new(p: &Prepared, bins: &mut Vec<Bin>, w: usize) -> bool {
    let mut best: Option<(f64, usize, usize)> = None;
    for m in 0..p.models.len() {
        let Some((fm, fc)) = p.fractions(w, m) else {
            continue;
        };
        let used = bins.iter().filter(|b| b.model == m).count();
        let left = p.avail[m].len() - used;
        if left == 0 {
            continue;
        }
        let share = fm.max(fc);
        let current = p.current_model[w] == Some(m);
        let better = match best {
            None => true,
            Some((bs, bl, bm)) => {
                let best_current = p.current_model[w] == Some(bm);
                share < bs - 1e-9
                    || (share < bs + 1e-9
                        && (current && !best_current || (current == best_current && left > bl)))
            }
        };
        if better {
            best = Some((share, left, m));
        }
    }
    match best {
        Some((_, _, m)) => {
            let mut b = Bin::new(m);
            b.add(p, w);
            bins.push(b);
            true
        }
        None => false,
    }
}

/// Try to empty bins, fewest workloads first, into the others.
fn improve(p: &Prepared, bins: &mut Vec<Bin>) {
    let mut tried = 0;
    while tried < bins.len() {
        let mut idx: Vec<usize> = (0..bins.len()).collect();
        idx.sort_by(|&a, &b| {
            bins[a]
                .workloads
                .len()
                .cmp(&bins[b].workloads.len())
                .then(bins[b].free_share(p).total_cmp(&bins[a].free_share(p)))
        });
        let victim = idx[tried];
        let snapshot = bins.clone();
        let moving = bins[victim].workloads.clone();
        let mut ok = true;
        for &w in &moving {
            if !place_best_fit(p, bins, w, Some(victim)) {
                ok = false;
                break;
            }
        }
        if ok {
            // One pass over the bins (no restart): keeps 1,000 workloads well under a second.
            bins.remove(victim);
        } else {
            *bins = snapshot;
            tried += 1;
        }
    }
}

/// Baseline: first-fit decreasing by memory need, each workload's model fixed to the first model
/// (in fleet order) that can hold it, GPUs filled in opening order.
pub(crate) fn first_fit_decreasing_by_memory(p: &Prepared) -> (Vec<Bin>, Vec<usize>) {
    let mut order = p.placeable.clone();
    order.sort_by_key(|&w| (std::cmp::Reverse(p.workloads[w].memory_bytes), w));
    let mut bins: Vec<Bin> = Vec::new();
    let mut left = Vec::new();
    for &w in &order {
        if let Some(b) = bins.iter_mut().find(|b| b.fits(p, w)) {
            b.add(p, w);
            continue;
        }
        let m = (0..p.models.len()).find(|&m| {
            p.need[w][m].is_some()
                && bins.iter().filter(|b| b.model == m).count() < p.avail[m].len()
        });
        match m {
            Some(m) => {
                let mut b = Bin::new(m);
                b.add(p, w);
                bins.push(b);
            }
            None => left.push(w),
        }
    }
    (bins, left)
}
