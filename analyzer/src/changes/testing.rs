//! The change tests' generator of random partitions: proptest's own RNG (ChaCha) seeded from the
//! case's seed, with the one draw the generators need. Test code only.

use proptest::prelude::Rng;
use proptest::test_runner::{RngAlgorithm, TestRng};

/// A deterministic generator for one test case.
pub(super) struct Seeded(TestRng);

impl Seeded {
    pub(super) fn new(seed: u64) -> Seeded {
        let mut bytes = [0u8; 32];
        bytes[..8].copy_from_slice(&seed.to_le_bytes());
        Seeded(TestRng::from_seed(RngAlgorithm::ChaCha, &bytes))
    }

    /// A number in `0..n`.
    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.0.next_u64() % n
    }
}
