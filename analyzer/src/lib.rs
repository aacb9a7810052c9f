//! tessera's analyzer library: scenario tooling (summaries and ground-truth files) on top of the
//! exporter's simulator, and ingest of history and CSV sources into canonical polars frames
//! (`ingest`). Detectors and planners arrive with later issues.
//!
//! Architecture invariant: the analyzer never calls NVML; anything about GPUs comes through the
//! exporter's library (`tessera_exporter`).

pub mod advisor;
pub mod ingest;
pub mod scenario;
