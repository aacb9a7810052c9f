//! tessera's analyzer library. For now: scenario tooling (summaries and ground-truth files) on top
//! of the exporter's simulator. History ingest, detectors and planners arrive with later issues.
//!
//! Architecture invariant: the analyzer never calls NVML; anything about GPUs comes through the
//! exporter's library (`tessera_exporter`).

pub mod scenario;
