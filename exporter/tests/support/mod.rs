//! Helpers shared by the exporter's integration tests.

pub mod logs;
