//! Helpers shared by the analyzer's integration tests: the CLI runner, a real Alertmanager (also
//! behind TLS) and a scripted HTTP server, a private PKI (rcgen), OpenMetrics text of
//! history rows, a real Prometheus serving backfilled blocks, the simulated history of the
//! Slurm jobs, and a generated benchmark fleet simulated into history.

pub mod alertmanager;
pub mod cli;
pub mod fleet;
pub mod openmetrics;
pub mod pki;
pub mod prometheus;
pub mod slurm_jobs;
