//! The real NVML backend against the fake `libnvidia-ml.so`, one binary: setup, value-for-value
//! equivalence with the simulated backend, every call's error paths, MIG writes, the old
//! driver, and reading the slow counters once per interval. `common` loads the libraries and serialises the tests that use
//! them. `environment.rs` is a binary of its own: it sets process-global environment variables
//! and needs a library that no other test configured.

mod common;

mod equivalence;
mod errors;
mod mig_write;
mod old_driver;
mod setup;
mod slow_reads;
