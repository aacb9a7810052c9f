//! Unit tests of the tallies: histogram quantiles against sorted ones, folding order.

use super::hist::{Hist, from_total_key, rounded_quantile, total_key};
use super::*;
use crate::stats::quantile;

fn exact(values: &[f64], q: f64) -> Option<f64> {
    quantile(&mut values.to_vec(), q).map(r3)
}

fn via_hist(values: &[f64], q: f64) -> Option<f64> {
    let mut h = Hist::default();
    for &v in values {
        h.add(v);
    }
    match rounded_quantile(&h, q) {
        Ok(r) => r,
        Err((k, rank)) => {
            let mut v: Vec<f64> = values
                .iter()
                .copied()
                .filter(|&v| bucket_of(v) == Some(k))
                .collect();
            v.sort_by(|a, b| a.total_cmp(b));
            v.get(rank as usize).copied().map(r3)
        }
    }
}

#[test]
fn histogram_quantiles_equal_sorted_ones() {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x >> 11) as f64 / (1u64 << 53) as f64
    };
    for n in [1, 2, 3, 10, 1000, 20_000] {
        let v: Vec<f64> = (0..n).map(|_| next()).collect();
        for q in [0.0, 0.5, 0.95, 1.0] {
            assert_eq!(exact(&v, q), via_hist(&v, q), "n {n} q {q}");
        }
    }
    // Values on rounding boundaries, outside 0–1, −0, NaN, repeated.
    let odd = [
        0.0005,
        0.0015,
        0.9995,
        1.0,
        1.0,
        -0.0,
        0.0,
        -0.25,
        2.0,
        f64::NAN,
        0.0625,
        0.1235,
    ];
    for q in [0.0, 0.1, 0.3, 0.5, 0.7, 0.95, 1.0] {
        let a = exact(&odd, q);
        let b = via_hist(&odd, q);
        assert_eq!(a.map(f64::to_bits), b.map(f64::to_bits), "q {q}");
    }
    assert_eq!(via_hist(&[], 0.5), None);
}

#[test]
fn total_keys_order_as_total_cmp() {
    let v = [
        f64::NAN,
        -f64::NAN,
        -1.0,
        -0.0,
        0.0,
        1e-300,
        0.5,
        1.0,
        f64::INFINITY,
    ];
    for a in v {
        assert_eq!(from_total_key(total_key(a)).to_bits(), a.to_bits());
        for b in v {
            assert_eq!(total_key(a).cmp(&total_key(b)), a.total_cmp(&b), "{a} {b}");
        }
    }
}
