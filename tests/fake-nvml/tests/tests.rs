//! The real NVML backend against the fake `libnvidia-ml.so`, one binary: setup and the
//! environment, value-for-value equivalence with the simulated backend, every call's error paths,
//! MIG writes, and the old driver. `common` loads the libraries and serialises the tests that use
//! them.

mod common;

mod environment;
mod equivalence;
mod errors;
mod mig_write;
mod old_driver;
mod setup;
