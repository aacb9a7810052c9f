//! tessera-exporter's library: the node daemon around `tessera_core`'s device layer.
//!
//! - [`sampler`]: the sampler thread that publishes immutable snapshots (the only caller of a
//!   backend while the exporter runs).
//! - [`idle`]: how long each process and GPU has done nothing (on the sampler's clock).
//! - [`attribution`]: the pod, container or Slurm job of a GPU process, from `/proc/<pid>/cgroup`.
//! - [`kubelet`]: the pod, namespace and container holding each GPU and MIG device, from the
//!   kubelet's pod-resources API, refreshed on a thread of its own.
//! - [`slurm`]: the Slurm job holding each GPU, from Slurm's job cgroups and its processes'
//!   environment, scanned on the sampler thread.
//! - [`history_thread`]: the history writer on its own thread, fed off the sampler's hot path.
//! - [`once`]: one snapshot as a table or JSON (the `--once` output).
//! - [`metrics`]: the Prometheus exposition, one collector per file behind one trait.
//! - [`web`]: the HTTP layer (telemetry path, landing page, health, TLS, basic auth, limits).
//!
//! Architecture invariant: this crate never links polars and never depends on the analyzer
//! (`tessera`); the device layer, MIG and the history format are `tessera_core`'s.

pub mod attribution;
pub mod device_ids;
pub mod history_thread;
pub mod idle;
pub mod kubelet;
pub mod metrics;
pub mod once;
pub mod sampler;
pub mod slurm;
pub mod web;
