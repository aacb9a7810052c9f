//! tessera's (the analyzer's) integration tests, one binary (they link polars once): ingest of
//! every source, the advisor's accuracy and edges, the report and its delivery (a real SMTP server, webhooks), the MIG commands, `tessera replay`, `tessera notify` against a
//! real Alertmanager, and the Prometheus source against a test server and a real Prometheus. `support` holds the shared CLI
//! runner and the Prometheus helpers. `parsers_prop.rs` is a binary of its own: it owns the global
//! allocator.

mod support;

mod actions;
mod advisor_accuracy;
mod advisor_busy;
mod advisor_edges;
mod agreement;
mod allocated;
mod atomic_writes;
mod changes;
mod deliver;
mod energy;
mod extremes;
mod hostile_names;
mod ingest;
mod job;
mod job_work;
mod metric_stores;
mod mig_cli;
mod mig_manager;
mod mig_manager_faults;
mod mig_plan_cli;
mod mig_schedule;
mod notify;
mod notify_faults;
mod occupancy;
mod offpeak_trace;
mod owners;
mod plan_out;
mod printed_commands;
mod prometheus_holders;
mod prometheus_http;
mod prometheus_occupancy;
mod prometheus_partitions;
mod prometheus_real;
mod prometheus_rules;
mod queue_kueue;
mod queue_volcano;
mod queues;
mod replay;
mod report;
mod report_duckdb;
mod report_html;
mod report_model;
mod sampling_matrix;
mod scale_down;
mod scale_down_faults;
mod sharing;
mod slurm_queues;
mod slurm_real;
mod spill;
mod trend;
mod work_consolidation;
mod work_live_scrape;
mod work_per_gpu_hour;
mod work_per_gpu_hour_changes;
mod work_per_gpu_hour_sampling;
