//! Helpers shared by the analyzer's integration tests: the CLI runner, OpenMetrics text of
//! history rows, and a real Prometheus serving backfilled blocks.

pub mod cli;
pub mod openmetrics;
pub mod prometheus;
