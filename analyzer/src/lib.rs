//! tessera's analyzer library: scenario tooling (summaries and ground-truth files) on top of the
//! exporter's simulator, ingest of history, CSV and Prometheus sources into canonical polars
//! frames (`ingest`), and the advisor's detectors over those frames (`advisor`). The MIG planner
//! and the weekly report arrive with later issues.
//!
//! Architecture invariant: the analyzer never calls NVML; anything about GPUs comes through the
//! exporter's library (`tessera_exporter`).

pub mod advisor;
pub mod ingest;
pub mod scenario;
