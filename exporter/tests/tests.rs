//! tessera-exporter's integration tests, one binary: process attribution, the deploy manifests,
//! the Helm chart (real Helm engine, strict schema validation of every deploy/ object),
//! the history thread and writer, pod names from a fake kubelet, the GPUs Slurm jobs hold (fake
//! cgroup and procfs roots), the `/metrics` exposition (golden files), the sampler, and the web
//! layer. `web_props.rs` is a binary of its own: it owns the global allocator.

mod support;

mod attribution;
mod deploy;
mod helm;
mod history;
mod kubelet;
mod metrics;
mod sampler;
mod slurm;
mod web;
mod web_hardening;
