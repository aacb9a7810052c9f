//! The simulated fleet: a deterministic, seeded model of nodes × GPUs × workloads × faults on a
//! virtual clock, and [`SimBackend`], the [`GpuBackend`] that samples one of its nodes.
//!
//! - [`scenario`]: the TOML scenario format (strict parser, validation).
//! - [`activity`]: what each workload does at an instant (pure functions of seed and time).
//! - [`node`]: a node's GPUs with real MIG tables, turned into readings with faults.
//! - [`truth`]: the ground-truth file of planted conditions, for scoring the analyzer.
//! - [`schedule`]: MIG layouts with `from`/`until` windows put in force as time passes.
//! - [`held`]: which pod or Slurm job holds each device at an instant (the allocation a kubelet
//!   or Slurm would report).
//! - [`slow`]: what [`SimBackend`] carries between reads of the slow counters, as the NVML
//!   backend does ([`crate::device::SlowReads`]).
//!
//! The same readings also back the fake `libnvidia-ml.so` in `tests/fake-nvml`, so the NVML
//! backend and the simulated backend can be compared value for value.
//!
//! This module never touches a real GPU and does no I/O except reading a scenario file.

pub mod activity;
pub mod control;
pub mod held;
pub mod node;
pub mod scenario;
pub mod schedule;
pub mod slow;
pub mod truth;

use std::time::Instant;

pub use node::{GpuReading, NodeReading, SimNode};
pub use scenario::{Scenario, ScenarioError};

use crate::device::{DeviceError, GpuBackend, SlowReads};
use crate::model::{FieldError, GpuSample, GpuStatus, Inventory, NodeSample};

impl From<ScenarioError> for DeviceError {
    fn from(e: ScenarioError) -> DeviceError {
        DeviceError::Setup {
            detail: e.to_string(),
        }
    }
}

impl GpuReading {
    /// The sample a backend reports for this reading: failed fields absent and listed in
    /// `errors`, status `Degraded` when any failed.
    pub fn into_sample(self) -> GpuSample {
        let mut s = self.sample;
        for (field, kind) in self.errors {
            field.clear(&mut s);
            s.errors.push(FieldError {
                field: field.as_str().to_string(),
                kind,
            });
        }
        if !s.errors.is_empty() && s.status == GpuStatus::Ok {
            s.status = GpuStatus::Degraded;
        }
        s
    }
}

/// How the simulated backend's virtual clock moves.
#[derive(Debug, Clone)]
pub enum SimClock {
    /// Each sample is taken `step_ms` after the previous one, starting at `start_ms`: fully
    /// deterministic (tests, `--once`, `tessera simulate`).
    Stepped { next_ms: i64, step_ms: i64 },
    /// Virtual time runs `speed` times faster than real time from `start_ms`.
    Wall {
        start_ms: i64,
        origin: Instant,
        speed: f64,
    },
}

impl SimClock {
    /// A stepped clock: the first sample at `next_ms`, each next one `step_ms` later.
    pub fn stepped(next_ms: i64, step_ms: i64) -> SimClock {
        SimClock::Stepped { next_ms, step_ms }
    }

    fn tick(&mut self) -> i64 {
        match self {
            SimClock::Stepped { next_ms, step_ms } => {
                let t = *next_ms;
                *next_ms += *step_ms;
                t
            }
            SimClock::Wall {
                start_ms,
                origin,
                speed,
            } => *start_ms + (origin.elapsed().as_secs_f64() * *speed * 1000.0) as i64,
        }
    }
}

/// The simulated backend: samples one node of a scenario on a virtual clock.
#[derive(Debug, Clone)]
pub struct SimBackend {
    node: SimNode,
    clock: SimClock,
    /// Per GPU: what is carried between reads of the slow counters.
    slow: Vec<slow::SlowCarry>,
    /// The next sample's time, fixed by [`GpuBackend::stamp`].
    stamped: Option<i64>,
}

impl SimBackend {
    /// Simulate `node` (default: the scenario's first node).
    pub fn new(
        scenario: &Scenario,
        node: Option<&str>,
        clock: SimClock,
    ) -> Result<SimBackend, ScenarioError> {
        let name = node.unwrap_or(&scenario.nodes[0].name);
        let node = SimNode::new(scenario, name).ok_or_else(|| ScenarioError::Invalid {
            path: scenario.source.clone(),
            item: "--sim.node".into(),
            message: format!(
                "no node {name:?}; the scenario has {}",
                scenario
                    .nodes
                    .iter()
                    .map(|n| n.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        })?;
        Ok(SimBackend {
            node,
            clock,
            slow: Vec::new(),
            stamped: None,
        })
    }

    /// The simulated node.
    pub fn node(&self) -> &SimNode {
        &self.node
    }
}

impl GpuBackend for SimBackend {
    fn name(&self) -> &'static str {
        "sim"
    }

    fn inventory(&mut self) -> Result<Inventory, DeviceError> {
        Ok(self.node.inventory())
    }

    fn stamp(&mut self) -> i64 {
        let t = self.stamped.unwrap_or_else(|| self.clock.tick());
        self.stamped = Some(t);
        t
    }

    fn sample_with(&mut self, slow: SlowReads) -> Result<NodeSample, DeviceError> {
        let t = self.stamped.take().unwrap_or_else(|| self.clock.tick());
        let reading = self.node.read(t);
        if reading.driver_error {
            return Err(DeviceError::Nvml {
                call: "nvmlDeviceGetHandleByIndex_v2".into(),
                kind: "unknown".into(),
            });
        }
        let mut gpus: Vec<GpuSample> = reading
            .gpus
            .into_iter()
            .map(GpuReading::into_sample)
            .collect();
        self.slow.resize_with(gpus.len(), Default::default);
        for (g, carry) in gpus.iter_mut().zip(self.slow.iter_mut()) {
            carry.apply(slow, g);
        }
        Ok(NodeSample {
            timestamp_ms: reading.timestamp_ms,
            gpus,
        })
    }
}

/// The demo scenario shipped in `fixtures/scenarios/demo.toml`, embedded as the default for
/// `--backend sim` so the exporter runs with no GPU and no file.
pub const DEMO_SCENARIO: &str = include_str!("../../../fixtures/scenarios/demo.toml");

/// Load `path`, or the embedded demo scenario when `path` is `None`.
pub fn load_scenario(path: Option<&std::path::Path>) -> Result<Scenario, ScenarioError> {
    match path {
        Some(p) => Scenario::from_file(p),
        None => Scenario::from_toml(DEMO_SCENARIO, "embedded demo scenario"),
    }
}

impl crate::mig::profile_reader::ProfileReader for SimBackend {
    fn backend_name(&self) -> &'static str {
        "sim"
    }

    /// The built-in table of each simulated GPU's model (empty for a model without MIG): a
    /// simulated node reports exactly what tessera knows.
    fn profile_tables(
        &mut self,
    ) -> Result<
        Vec<crate::mig::profile_reader::GpuProfileTable>,
        crate::mig::profile_reader::ProfileReadError,
    > {
        use crate::mig::profile_compare::ReportedProfile;
        Ok(self
            .node
            .inventory()
            .gpus
            .iter()
            .map(|g| crate::mig::profile_reader::GpuProfileTable {
                gpu: g.index,
                name: g.name.clone(),
                profiles: crate::mig::model_by_nvml_name(&g.name)
                    .map(|m| {
                        m.profiles
                            .iter()
                            .map(ReportedProfile::from_builtin)
                            .collect()
                    })
                    .unwrap_or_default(),
            })
            .collect())
    }
}
