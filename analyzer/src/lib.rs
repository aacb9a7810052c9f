//! tessera's analyzer library: scenario tooling (summaries and ground-truth files) on top of the
//! exporter's simulator, ingest of history, CSV and Prometheus sources into canonical polars
//! frames (`ingest`), the advisor's detectors over those frames (`advisor`) and the weekly report
//! built from both (`report`). The MIG planner arrives with a later issue.
//!
//! Architecture invariant: the analyzer never calls NVML; anything about GPUs comes through the
//! exporter's library (`tessera_exporter`).

pub mod advisor;
pub mod ingest;
pub mod report;
pub mod scenario;
