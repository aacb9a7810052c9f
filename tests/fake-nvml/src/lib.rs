//! A fake `libnvidia-ml.so` backed by tessera's simulated fleet, for testing the real NVML code
//! path ([`tessera_core::nvml::NvmlBackend`] over nvml-wrapper) without a GPU.
//!
//! Built as a `cdylib` (`libnvidia_ml.so`) exporting the NVML C functions the backend calls
//! (and those nvml-wrapper calls itself: `nvmlInit_v2`, `nvmlShutdown`,
//! `nvmlSystemGetDriverVersion`). Each call answers from one simulated node
//! ([`tessera_core::sim::SimNode`]) read at a virtual time, so the NVML backend can be
//! compared value for value with the simulated backend.
//!
//! Control (non-NVML) symbols, for tests that `dlopen` the same library:
//! - `int tesseraFakeLoadScenario(const char *path, const char *node)`;
//! - `void tesseraFakeSetTimeMs(int64_t)`, `void tesseraFakeAdvanceMs(int64_t)`,
//!   `int64_t tesseraFakeTimeMs(void)`;
//! - `void tesseraFakeInjectError(const char *function, int device_index /* -1: all */,
//!   int nvml_return /* 0 clears */)` (a null function clears every injection).
//!
//! Out of process (the exporter binary with `--nvml.lib-path`), the library configures itself
//! from the environment at `nvmlInit_v2`: `TESSERA_FAKE_NVML_SCENARIO` (required),
//! `TESSERA_FAKE_NVML_NODE` (default: the first node), `TESSERA_FAKE_NVML_TIME` (RFC 3339,
//! default: the scenario start), and either `TESSERA_FAKE_NVML_SPEED` (virtual seconds per real
//! second) or `TESSERA_FAKE_NVML_STEP_MS` (each `nvmlDeviceGetCount_v2` call after the first — one
//! per sample — moves time forward by this much). A missing or bad scenario makes `nvmlInit_v2`
//! return `NVML_ERROR_UNKNOWN` with the reason on stderr. `TESSERA_FAKE_NVML_PROFILE_PATCH`
//! (read at every call) alters one profile of the reported MIG profile tables
//! (`state::patched_profile`), as a driver whose tables differ from tessera's would.
//!
//! MIG writes (`mig_write_exports`: instance create/destroy/list, MIG mode) follow the simulated
//! backend's rules and change what the read calls report afterwards.
//!
//! `tests/fake-nvml-old` builds the same sources without `extra_exports` and the MIG writes: an "old driver"
//! library whose missing functions come back as `FailedToLoadSymbol`.
//!
//! This crate is test tooling: it is never linked into the exporter.

mod core_exports;
mod extra_exports;
mod mig_write_exports;
mod process_buffer;
mod state;
