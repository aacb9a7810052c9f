//! tessera's analyzer library: scenario tooling (summaries and ground-truth files) on top of
//! `tessera_core`'s simulator, ingest of history, CSV and Prometheus sources into canonical polars
//! frames (`ingest`), the advisor's detectors over those frames (`advisor`), the MIG layout
//! planner with day/night schedules (`mig_planner`), the one count of GPUs before/after/freed of
//! every plan (`gpu_count`) and the weekly report built from all of them
//! (`report`) and its delivery by mail and chat (`deliver`), each GPU's energy split among its workloads (`energy`), the findings sent to
//! Alertmanager (`notify`), one Slurm job's use and verdict (`jobs`), a plan replayed against
//! history (`replay`), the `tessera` commands the outputs suggest (`commands`), the one time-range rule of every command (`range`), the one freshness rule of the commands that act on evidence (`evidence`), the one Kubernetes layer of the commands that act on a cluster (`kubernetes`), idle workloads scaled
//! to zero on Kubernetes and back (`scale_down`), GPU sharing configs from the consolidation
//! moves rolled out through the device plugin (`sharing`), the one quantile (`stats`), the prices every costed output uses (`prices`), the queue plan of team quotas and off-peak windows for batch schedulers' queues
//! (`queues`), the one output layer that
//! every command's text, Markdown, HTML and JSON goes through, escaping data once at its boundary
//! (`output`), and the time vocabulary every module may use (`times`).
//!
//! Architecture invariant: the analyzer never calls NVML itself and never links the exporter's web
//! stack; the `mig` commands reach GPUs only through `tessera_core`'s device layer.

pub mod actions;
pub mod advisor;
pub mod changes;
pub mod commands;
pub mod deliver;
pub mod energy;
pub mod evidence;
pub mod frames;
pub mod gpu_count;
pub mod ingest;
pub mod jobs;
pub mod kubernetes;
pub mod mig_manager;
pub mod mig_planner;
pub mod notify;
pub mod output;
pub mod owners;
pub mod prices;
pub mod process;
pub mod queues;
pub mod range;
pub mod replay;
pub mod report;
pub mod scale_down;
pub mod scenario;
pub mod sharing;
pub mod stats;

pub mod times;
pub mod timing;
pub mod work;
