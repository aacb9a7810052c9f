//! The device layer's one interface: [`GpuBackend`].
//!
//! Everything that touches a GPU goes through this trait. Two implementations exist:
//! [`NvmlBackend`](crate::nvml::NvmlBackend) (the real driver, or a fake `libnvidia-ml.so` in
//! tests) and [`SimBackend`](crate::sim::SimBackend) (a seeded, simulated node on a virtual
//! clock). This module holds the trait, its error type and when a sample reads the slow counters
//! ([`SlowReads`], [`SlowSchedule`]); it does no I/O itself.
//!
//! Architecture invariant: backends are called only from the sampler thread (or a one-shot CLI
//! command). HTTP handlers and the analyzer never call a backend while serving a request; they read
//! published snapshots instead.
//!
//! This is the read side. The MIG write side (create/destroy instances, MIG mode) is
//! [`crate::mig::control::MigControl`], implemented by the same two backends; only the one-shot
//! `tessera mig apply` calls it.

use crate::model::{Inventory, NodeSample};

/// Errors at the device-layer boundary.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// The NVML library could not be loaded (no driver installed, or a wrong `--nvml.lib-path`).
    #[error(
        "NVML not available: {detail} — is the NVIDIA driver installed? Use --backend sim to try without a GPU"
    )]
    LibraryNotFound { detail: String },
    /// The library loaded but the kernel driver is not running.
    #[error(
        "NVML not available: the NVIDIA kernel driver is not loaded ({detail}). Use --backend sim to try without a GPU"
    )]
    DriverNotLoaded { detail: String },
    /// The loaded library lacks a function tessera needs (driver too old, or an incomplete fake).
    #[error("NVML function {symbol} is missing from the loaded library (driver too old?)")]
    MissingSymbol { symbol: String },
    /// A node-level NVML call failed (the sampler re-initialises with backoff).
    #[error("NVML call {call} failed: {kind}")]
    Nvml { call: String, kind: String },
    /// The backend could not be set up from its configuration (e.g. an invalid simulator
    /// scenario: `sim` converts its `ScenarioError` into this, so this module names no backend).
    #[error("{detail}")]
    Setup { detail: String },
}

impl DeviceError {
    /// Whether the error means the driver itself is unusable, so the backend should be re-created
    /// (NVML re-initialised) rather than merely retried.
    pub fn is_driver_level(&self) -> bool {
        matches!(
            self,
            DeviceError::DriverNotLoaded { .. }
                | DeviceError::Nvml { .. }
                | DeviceError::LibraryNotFound { .. }
        )
    }
}

/// A source of GPU inventory and samples for one node.
///
/// One call to [`sample`](GpuBackend::sample) returns one consistent snapshot of every GPU. A
/// failure confined to one GPU is reported in that GPU's [`status`](crate::model::GpuSample::status)
/// and never drops the others; only node-level failures (driver gone) are returned as `Err`.
pub trait GpuBackend: Send {
    /// Short backend name for logs and self-metrics (`nvml`, `sim`).
    fn name(&self) -> &'static str;

    /// Identity and configuration of every GPU on the node.
    fn inventory(&mut self) -> Result<Inventory, DeviceError>;

    /// One snapshot of every GPU, MIG instance and process on the node, reading everything.
    fn sample(&mut self) -> Result<NodeSample, DeviceError> {
        self.sample_with(SlowReads::Read)
    }

    /// One snapshot, reading the slow counters or carrying their last reading ([`SlowReads`]).
    fn sample_with(&mut self, slow: SlowReads) -> Result<NodeSample, DeviceError>;

    /// Fix and return the timestamp (unix ms) the next sample will carry, so that the caller
    /// can decide what it reads ([`SlowSchedule`]) by the sample's own time. The default, for
    /// backends stamped with the system clock, is the system clock now; a backend on another
    /// clock (the simulator's) overrides it.
    fn stamp(&mut self) -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0)
    }
}

/// Whether a sample reads the two slow counters — a GPU's cumulative energy counter and its
/// per-process utilisation, 3 ms and 2 ms a GPU of a 6 ms sample on H100/H200
/// (docs/performance.md) — or carries their last reading (issue 51).
///
/// With [`SlowReads::Carry`] a backend reports for each GPU the energy counter it last read and,
/// per process, the newest SM utilisation it last read ([`ProcessSample::sm_ratio`](crate::model::ProcessSample::sm_ratio)), with no
/// new readings ([`ProcessSample::sm_readings`](crate::model::ProcessSample::sm_readings) empty).
/// A [`SlowReads::Read`] gets every per-process reading NVML made since the previous read, so
/// reading once per history interval loses none and the interval's mean and maximum are those of
/// reading every sample. A GPU with nothing to carry yet (the first sample, after it was lost)
/// is read whatever was asked. Which samples read is the caller's decision
/// ([`SlowSchedule`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlowReads {
    /// Read the energy counter and per-process utilisation.
    Read,
    /// Report their last reading.
    Carry,
}

/// Reading the slow counters once per interval: on the last sample of each interval
/// `(end − interval, end]` of the samples' clock — the history's intervals
/// ([`crate::history::aggregate`]) — so each interval's energy delta and per-process readings are
/// those of reading every sample.
///
/// Pure: [`SlowSchedule::due`] decides from the timestamp the sample will carry
/// ([`GpuBackend::stamp`]). The time between samples is the time since the previous call (so a
/// simulated clock running faster than real time is followed), and a sample is the last of its
/// interval when the next one, that time later, falls past the interval's end. A read is also
/// due on the first call, when the clock went back, when none was made for an interval and a
/// sample's time (missed ticks, a clock step), and always when samples are at least an interval
/// apart. Where a sample comes later than the previous gap foretold, across a boundary, one
/// sample's share goes to the neighbouring interval; the total is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlowSchedule {
    interval_ms: i64,
    last_call_ms: Option<i64>,
    last_read_ms: Option<i64>,
}

impl SlowSchedule {
    /// Read once per `interval_ms` (the history interval, or the exporter's `--energy.interval`).
    pub fn new(interval_ms: i64) -> SlowSchedule {
        SlowSchedule {
            interval_ms: interval_ms.max(1),
            last_call_ms: None,
            last_read_ms: None,
        }
    }

    /// The interval, ms.
    pub fn interval_ms(&self) -> i64 {
        self.interval_ms
    }

    /// What the sample about to be stamped `now_ms` reads; remembered.
    pub fn due(&mut self, now_ms: i64) -> SlowReads {
        let i = self.interval_ms;
        let period = self.last_call_ms.map(|l| now_ms - l);
        self.last_call_ms = Some(now_ms);
        let read = match (period, self.last_read_ms) {
            (Some(period), Some(last)) if period > 0 && now_ms >= last => {
                let end = now_ms.div_euclid(i) * i + if now_ms.rem_euclid(i) == 0 { 0 } else { i };
                period >= i || end - now_ms < period || now_ms - last >= i + period
            }
            _ => true,
        };
        if read {
            self.last_read_ms = Some(now_ms);
            SlowReads::Read
        } else {
            SlowReads::Carry
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sample times at which `s` reads, for samples at `times`.
    fn reads(s: &mut SlowSchedule, times: impl IntoIterator<Item = i64>) -> Vec<i64> {
        times
            .into_iter()
            .filter(|&t| s.due(t) == SlowReads::Read)
            .collect()
    }

    #[test]
    fn reads_on_the_last_sample_of_each_interval() {
        // 1 s samples 300 ms into each second, 10 s intervals: the first sample, then 9.3, 19.3, ...
        let mut s = SlowSchedule::new(10_000);
        let got = reads(&mut s, (0..40).map(|k| 300 + k * 1000));
        assert_eq!(got, vec![300, 9_300, 19_300, 29_300, 39_300]);
        // A sample exactly on a boundary belongs to the interval it ends: it is that one's last.
        let mut s = SlowSchedule::new(10_000);
        let got = reads(&mut s, (0..21).map(|k| k * 1000));
        assert_eq!(got, vec![0, 10_000, 20_000]);
    }

    #[test]
    fn jittered_samples_read_once_per_interval_on_its_last_sample() {
        // Samples about a second apart, up to 40 ms late: one read per interval, on the last
        // sample whose time is in it.
        let mut s = SlowSchedule::new(10_000);
        let jitter = [0, 40, 5, 31, 12, 0, 39, 20, 7, 33];
        let times: Vec<i64> = (0..60)
            .map(|k| 500 + k * 1000 + jitter[k as usize % 10])
            .collect();
        let got = reads(&mut s, times.iter().copied());
        let mut expected = vec![times[0]];
        let next = times[times.len() - 1] + 1000;
        for w in times
            .iter()
            .copied()
            .chain([next])
            .collect::<Vec<_>>()
            .windows(2)
        {
            if w[0].div_euclid(10_000) != w[1].div_euclid(10_000) {
                expected.push(w[0]);
            }
        }
        assert_eq!(got, expected);
    }

    #[test]
    fn samples_an_interval_apart_or_more_always_read_and_gaps_catch_up() {
        let mut s = SlowSchedule::new(10_000);
        assert_eq!(reads(&mut s, [0, 15_000, 30_000]), vec![0, 15_000, 30_000]);
        // Missed ticks: 2.5 s to 25.5 s without a sample, then a read at once, and the next on
        // the last sample of that interval.
        let mut s = SlowSchedule::new(10_000);
        let times = (0..3)
            .map(|k| 500 + k * 1000)
            .chain((25..30).map(|k| 500 + k * 1000));
        assert_eq!(reads(&mut s, times), vec![500, 25_500, 29_500]);
        // A clock that went back reads.
        let mut s = SlowSchedule::new(10_000);
        assert_eq!(reads(&mut s, [5_000, 6_000, 1_000]), vec![5_000, 1_000]);
    }
}
