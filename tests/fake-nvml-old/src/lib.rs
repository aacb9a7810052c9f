//! A fake `libnvidia-ml.so` of an *old* driver: the same sources as `tests/fake-nvml` (shared
//! with `#[path]`, no copy) without its newer functions — no GPM (`nvmlGpm*`), no
//! `nvmlDeviceGetTotalEnergyConsumption`, no `nvmlDeviceGetProcessUtilization`, no
//! `nvmlDeviceGetGpuInstancePossiblePlacements_v2`, no MIG writes (instance create/destroy/list,
//! `nvmlDeviceSetMigMode`), and clock event reasons only under their old
//! name `nvmlDeviceGetCurrentClocksThrottleReasons`.
//!
//! It does not depend on the `tessera-fake-nvml` crate, whose exported functions would otherwise
//! be linked in and exported again.

// Helpers used only by the newer functions are unused here.
#![allow(dead_code)]

#[path = "../../fake-nvml/src/core_exports/mod.rs"]
mod core_exports;
#[path = "../../fake-nvml/src/process_buffer.rs"]
mod process_buffer;
#[path = "../../fake-nvml/src/state.rs"]
mod state;
