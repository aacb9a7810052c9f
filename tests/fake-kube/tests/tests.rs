//! The fake API server against the real kube-rs client (kube 5, k8s-openapi v1_33): every
//! object, list, watch event and `Status` error must deserialize as kube-rs expects. One binary,
//! one module per area (ARCHITECTURE.md "Tests").
//!
//! What it does not cover: the `tessera` binary (analyzer tests run it against this server).

mod api;
mod device_plugin;
mod kueue;
mod mig_manager;
mod support;
mod volcano;
mod watch;
mod wire;
mod workloads;
