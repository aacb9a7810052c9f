//! Exact quantiles of groups that span partitions: a histogram of 2^20 equal buckets over 0–1
//! (values outside, NaN and −0 kept exactly, by value), and the rounding check that decides when
//! a second pass must read a bucket's values. Pure.

use std::collections::BTreeMap;

use super::r3;
use crate::stats::nearest_rank;

/// Buckets of the histogram over [0, 1): 2^20, each 2^-20 wide (exact in binary).
pub(super) const BUCKETS: usize = 1 << 20;

/// f64 bits ordered as `total_cmp` orders the values.
pub(super) fn total_key(v: f64) -> i64 {
    let b = v.to_bits() as i64;
    b ^ (((b >> 63) as u64) >> 1) as i64
}

pub(super) fn from_total_key(k: i64) -> f64 {
    f64::from_bits((k ^ (((k >> 63) as u64) >> 1) as i64) as u64)
}

/// The values of one group: a histogram of [0, 1) plus the exact values outside it.
#[derive(Default)]
pub(super) struct Hist {
    pub(super) n: u64,
    /// Values ordered before +0 (negative, −0, −NaN), by total order key.
    pub(super) below: BTreeMap<i64, u64>,
    pub(super) buckets: Vec<u64>,
    /// Values from 1 up (and +NaN), by total order key.
    pub(super) above: BTreeMap<i64, u64>,
}

/// Where the rank of a quantile falls.
pub(super) enum Found {
    Value(f64),
    /// In bucket `k`, at `rank` among the bucket's values.
    Bucket {
        k: usize,
        rank: u64,
    },
}

pub(super) fn bucket_of(v: f64) -> Option<usize> {
    (v.is_sign_positive() && v < 1.0).then(|| ((v * BUCKETS as f64) as usize).min(BUCKETS - 1))
}

impl Hist {
    pub(super) fn add(&mut self, v: f64) {
        self.n += 1;
        match bucket_of(v) {
            Some(k) => {
                if self.buckets.is_empty() {
                    self.buckets = vec![0; BUCKETS];
                }
                self.buckets[k] += 1;
            }
            None if v.is_sign_negative() => *self.below.entry(total_key(v)).or_default() += 1,
            None => *self.above.entry(total_key(v)).or_default() += 1,
        }
    }

    pub(super) fn find(&self, mut rank: u64) -> Found {
        for (&k, &c) in &self.below {
            if rank < c {
                return Found::Value(from_total_key(k));
            }
            rank -= c;
        }
        for (k, &c) in self.buckets.iter().enumerate() {
            if rank < c {
                return Found::Bucket { k, rank };
            }
            rank -= c;
        }
        for (&k, &c) in &self.above {
            if rank < c {
                return Found::Value(from_total_key(k));
            }
            rank -= c;
        }
        Found::Value(f64::NAN)
    }
}

/// The reported (rounded) quantile `q` of a histogram, or the bucket whose values a second pass
/// must read (and the rank among them) when the bucket straddles a rounding boundary.
pub(super) fn rounded_quantile(h: &Hist, q: f64) -> Result<Option<f64>, (usize, u64)> {
    if h.n == 0 {
        return Ok(None);
    }
    match h.find(nearest_rank(h.n, q)) {
        Found::Value(v) => Ok(Some(r3(v))),
        Found::Bucket { k, rank } => {
            let lo = k as f64 / BUCKETS as f64;
            let hi = f64::from_bits(((k + 1) as f64 / BUCKETS as f64).to_bits() - 1);
            // r3 is monotone: equal at both ends, equal for every value in between.
            if r3(lo).to_bits() == r3(hi).to_bits() {
                Ok(Some(r3(lo)))
            } else {
                Err((k, rank))
            }
        }
    }
}

/// How a group's quantile is kept: every value (a group inside one partition) or a histogram.
pub(super) enum Values {
    All(Vec<f64>),
    Hist(Hist),
}
