//! End-to-end tests of both binaries, one binary: the CLI, serving, the NVML path through the
//! fake library, MIG apply and profiles, hostile inputs, the monitoring assets against real
//! Prometheus and Alertmanager, stripped release builds, and the soak test.

mod build_commit;
mod cli;
mod dashboards;
mod debian;
mod dra;
mod gpu_check;
mod hostile_inputs;
mod images;
mod mig_nvml;
mod mig_profiles;
mod nvml_path;
mod packaging;
mod prometheus_e2e;
mod real_gpu;
mod release_binaries;
mod report_schedule;
mod rules;
mod serve;
mod soak;
mod structure;
