//! Rows of a partition kept per GPU and laid out by interval ([`PerGpu`]): the energy split's
//! MIG and process rows, matched to their intervals in row order, grouped by interval without a
//! scatter over the whole partition. It reads no frames and splits nothing
//! ([`super::frames`] does).

/// Rows `(interval, item)` kept per GPU, in the order they came. Each GPU's intervals are one
/// run of consecutive interval numbers, so each GPU's list put in interval order (stably), and
/// the lists laid end to end in the order of their first interval, are every row in interval
/// order, rows of one interval in the order they came: what a stable sort of all the rows by
/// interval gives, without a scatter over the whole partition.
pub(super) struct PerGpu<T>(Vec<Vec<(usize, T)>>);

impl<T: Copy> PerGpu<T> {
    pub(super) fn new() -> Self {
        PerGpu(Vec::new())
    }

    pub(super) fn push(&mut self, gpu: usize, v: usize, x: T) {
        if gpu >= self.0.len() {
            self.0.resize_with(gpu + 1, Vec::new);
        }
        self.0[gpu].push((v, x));
    }

    pub(super) fn len(&self) -> usize {
        self.0.iter().map(Vec::len).sum()
    }

    /// The items grouped by interval (`n` of them), in order within each: the items and where
    /// each interval's start (`starts[v]..starts[v + 1]`).
    pub(super) fn by_interval(self, n: usize) -> (Vec<usize>, Vec<T>) {
        let total = self.len();
        let mut lists: Vec<Vec<(usize, T)>> =
            self.0.into_iter().filter(|l| !l.is_empty()).collect();
        for l in &mut lists {
            if !l.is_sorted_by_key(|x| x.0) {
                l.sort_by_key(|x| x.0);
            }
        }
        lists.sort_by_key(|l| l[0].0);
        let mut starts = vec![0usize; n + 1];
        let mut out: Vec<T> = Vec::with_capacity(total);
        for l in lists {
            for (v, x) in l {
                starts[v + 1] += 1;
                out.push(x);
            }
        }
        for v in 0..n {
            starts[v + 1] += starts[v];
        }
        (starts, out)
    }
}

#[cfg(test)]
mod tests {
    use super::PerGpu;
    use proptest::prelude::*;

    /// A stable sort of every row by interval: what [`PerGpu::by_interval`] must give.
    fn sorted(n: usize, rows: &[(usize, (usize, u32))]) -> (Vec<usize>, Vec<(usize, u32)>) {
        let mut all: Vec<(usize, (usize, u32))> = rows.to_vec();
        all.sort_by_key(|r| r.0);
        let mut starts = vec![0usize; n + 1];
        for (v, _) in &all {
            starts[v + 1] += 1;
        }
        for v in 0..n {
            starts[v + 1] += starts[v];
        }
        (starts, all.into_iter().map(|r| r.1).collect())
    }

    proptest! {
        #[test]
        fn rows_kept_per_gpu_come_out_as_a_stable_sort_by_interval(
            // Each GPU's number of intervals, and rows as (GPU, interval within it).
            sizes in prop::collection::vec(1usize..6, 1..5),
            picks in prop::collection::vec((0usize..5, 0usize..6), 0..60),
            order in prop::collection::vec(0usize..5, 0..5),
        ) {
            // GPUs numbered in another order than their intervals (the keys' order is not the
            // intervals' order).
            let g = sizes.len();
            let mut first = vec![0usize; g];
            let mut at = 0;
            let mut seq: Vec<usize> = (0..g).collect();
            for (i, o) in order.iter().enumerate() {
                seq.swap(i % g, o % g);
            }
            for &k in &seq {
                first[k] = at;
                at += sizes[k];
            }
            let n = at;
            let mut per = PerGpu::new();
            let mut rows = Vec::new();
            for (i, &(k, j)) in picks.iter().enumerate() {
                let k = k % g;
                let v = first[k] + j % sizes[k];
                per.push(k, v, (v, i as u32));
                rows.push((v, (v, i as u32)));
            }
            prop_assert_eq!(per.by_interval(n), sorted(n, &rows));
        }
    }
}
