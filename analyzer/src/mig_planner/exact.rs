//! Exact search for small cases: branch and bound over "which GPU does each workload go to".
//!
//! Workloads are taken largest first; each goes into an open GPU where a legal placement of all
//! its instances exists, or opens one new GPU of a model with GPUs left (unopened GPUs of one
//! model are interchangeable, so one branch per model). A branch is cut when its open GPUs plus
//! a bound for the rest reach the best plan known: the rest needs at least
//! ceil(Σ its smallest memory shares − the free memory share of the open GPUs) more GPUs, and
//! likewise for compute. The search starts from the heuristic's GPU count and stops early when
//! it meets the global lower bound. With a node budget it may stop before proving optimality,
//! which the caller reports.

use super::{Bin, Prepared, lower_bound};

struct Search<'a, 'b> {
    p: &'a Prepared<'b>,
    order: Vec<usize>,
    /// Suffix sums of the smallest memory and compute shares of `order[k..]`.
    rest: Vec<(f64, f64)>,
    best: usize,
    best_bins: Option<Vec<Bin>>,
    nodes: u64,
    limit: u64,
    lb: usize,
}

/// Search for a plan of the workloads `ws` on fewer than `incumbent` GPUs. Returns the best plan
/// found (None if none beats the incumbent) and whether the search finished (proved optimality).
pub(crate) fn search(
    p: &Prepared,
    ws: &[usize],
    incumbent: usize,
    node_limit: u64,
) -> (Option<Vec<Bin>>, bool) {
    let mut order = ws.to_vec();
    order.sort_by(|&a, &b| {
        let (fa, fb) = (p.min_fractions(a), p.min_fractions(b));
        fb.0.max(fb.1).total_cmp(&fa.0.max(fa.1)).then(a.cmp(&b))
    });
    let mut rest = vec![(0.0, 0.0); order.len() + 1];
    for k in (0..order.len()).rev() {
        let (a, b) = p.min_fractions(order[k]);
        rest[k] = (rest[k + 1].0 + a, rest[k + 1].1 + b);
    }
    let mut s = Search {
        p,
        order,
        rest,
        best: incumbent,
        best_bins: None,
        nodes: 0,
        limit: node_limit,
        lb: lower_bound(p, ws) as usize,
    };
    let mut bins = Vec::new();
    let complete = s.go(0, &mut bins);
    (s.best_bins, complete)
}

impl Search<'_, '_> {
    /// Returns false when the node budget ran out.
    fn go(&mut self, k: usize, bins: &mut Vec<Bin>) -> bool {
        self.nodes += 1;
        if self.nodes > self.limit {
            return false;
        }
        if self.best <= self.lb {
            return true;
        }
        if k == self.order.len() {
            if bins.len() < self.best {
                self.best = bins.len();
                self.best_bins = Some(bins.clone());
            }
            return true;
        }
        // Bound.
        let (free_m, free_c) = bins.iter().fold((0.0, 0.0), |acc, b| {
            let m = self.p.models[b.model];
            (
                acc.0 + 1.0 - f64::from(b.slots) / f64::from(m.memory_slots),
                acc.1 + 1.0 - f64::from(b.compute) / f64::from(m.compute_slices),
            )
        });
        let more = |need: f64, free: f64| ((need - free - 1e-9).max(0.0)).ceil() as usize;
        let (rm, rc) = self.rest[k];
        if bins.len() + more(rm, free_m).max(more(rc, free_c)) >= self.best {
            return true;
        }
        let w = self.order[k];
        for i in 0..bins.len() {
            if bins[i].fits(self.p, w) {
                bins[i].add(self.p, w);
                let ok = self.go(k + 1, bins);
                bins[i].remove(self.p, w);
                if !ok {
                    return false;
                }
            }
        }
        if bins.len() + 1 < self.best {
            for m in 0..self.p.models.len() {
                if self.p.need[w][m].is_none()
                    || bins.iter().filter(|b| b.model == m).count() >= self.p.avail[m].len()
                {
                    continue;
                }
                let mut b = Bin::new(m);
                b.add(self.p, w);
                bins.push(b);
                let ok = self.go(k + 1, bins);
                bins.pop();
                if !ok {
                    return false;
                }
            }
        }
        true
    }
}
