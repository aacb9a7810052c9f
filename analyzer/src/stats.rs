//! The one quantile every part of the analyzer uses: nearest rank, in IEEE total order.
//!
//! Nearest rank of `q` among `n` values is `round((n − 1) · q)` (0-based), so `q = 0` is the
//! minimum and `q = 1` the maximum; an empty input has no quantile (`None`), and callers say what
//! that means for them. The values are reordered in place (`select_nth_unstable`), not sorted.
//! Pure; no frames.

use std::cmp::Ordering;

/// A float in IEEE total order (f32 and f64).
pub trait TotalOrder: Copy {
    /// `total_cmp`.
    fn total(&self, other: &Self) -> Ordering;
}

impl TotalOrder for f64 {
    fn total(&self, other: &Self) -> Ordering {
        self.total_cmp(other)
    }
}

impl TotalOrder for f32 {
    fn total(&self, other: &Self) -> Ordering {
        self.total_cmp(other)
    }
}

/// The nearest rank (0-based) of quantile `q` (clamped to 0–1) among `n ≥ 1` values.
pub fn nearest_rank(n: u64, q: f64) -> u64 {
    (((n.max(1) - 1) as f64 * q.clamp(0.0, 1.0)).round() as u64).min(n.max(1) - 1)
}

/// The nearest-rank quantile `q` of `v` (reordered); `None` when `v` is empty. Values equal in
/// total order have equal bits, so the value at the rank is the one a full sort puts there.
pub fn quantile<T: TotalOrder>(v: &mut [T], q: f64) -> Option<T> {
    if v.is_empty() {
        return None;
    }
    let i = nearest_rank(v.len() as u64, q) as usize;
    Some(*v.select_nth_unstable_by(i, |a, b| a.total(b)).1)
}

#[cfg(test)]
mod tests {
    use super::{nearest_rank, quantile};

    #[test]
    fn nearest_rank_in_total_order() {
        let mut v = [0.5, 0.1, 0.9, 0.3, 0.7];
        assert_eq!(quantile(&mut v, 0.0), Some(0.1));
        assert_eq!(quantile(&mut v, 0.5), Some(0.5));
        assert_eq!(quantile(&mut v, 0.95), Some(0.9));
        assert_eq!(quantile(&mut v, 1.0), Some(0.9));
        assert_eq!(quantile::<f64>(&mut [], 0.5), None);
        let mut f = [3.0f32, 1.0, 2.0];
        assert_eq!(quantile(&mut f, 0.5), Some(2.0));
        assert_eq!(nearest_rank(1, 0.99), 0);
        assert_eq!(nearest_rank(101, 0.95), 95);
        assert_eq!(nearest_rank(10, 7.0), 9);
    }
}
