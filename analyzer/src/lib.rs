//! tessera's analyzer library: scenario tooling (summaries and ground-truth files) on top of the
//! exporter's simulator, ingest of history, CSV and Prometheus sources into canonical polars
//! frames (`ingest`), the advisor's detectors over those frames (`advisor`), the MIG layout
//! planner with day/night schedules (`mig_planner`) and the weekly report built from all of them
//! (`report`).
//!
//! Architecture invariant: the analyzer never calls NVML; anything about GPUs comes through the
//! exporter's library (`tessera_exporter`).

pub mod advisor;
pub mod ingest;
pub mod mig_planner;
pub mod report;
pub mod scenario;
