//! The one way to name a device backend: [`BackendSpec`], the flags `--backend`,
//! `--nvml.lib-path`, `--sim.scenario` and `--sim.node` (clap-derivable with the `cli` feature),
//! declared once and flattened into the exporter and every `tessera mig` verb, and its openers:
//! the read side ([`GpuBackend`], through a [`ReaderOpener`] a sampler can call again after a
//! driver failure), the MIG write side ([`MigControl`]) and the profile tables
//! ([`ProfileReader`]).
//!
//! What it does not do: read or change a GPU itself (the backends do), or hold flags only one
//! command has (`--sim.time`, `--sim.speed` of the exporter; `--node`, `--sim.state` of the mig
//! verbs): those stay with the command and are passed to the opener.
//!
//! Architecture invariant: this module names no NVML type; the NVML side is opened through
//! `crate::nvml`'s `open_*` functions, so only `core/src/nvml/` names NVML types.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::device::{DeviceError, GpuBackend};
use crate::mig::control::{ControlError, MigControl};
use crate::mig::profile_reader::ProfileReader;
use crate::sim::control::SimMigControl;
use crate::sim::{self, Scenario, SimBackend, SimClock};

/// Which backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum BackendKind {
    /// The node's GPUs through NVML (the NVIDIA driver).
    #[default]
    Nvml,
    /// A simulated node of a scenario (no GPU needed).
    Sim,
}

/// The device backend flags, shared by every command that reads or changes GPUs.
#[derive(Debug, Clone, Default)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct BackendSpec {
    /// Device backend: the node's GPUs through NVML, or a simulated node of a scenario.
    #[cfg_attr(feature = "cli", arg(long, value_enum, default_value = "nvml"))]
    pub backend: BackendKind,
    /// Path of libnvidia-ml.so to load instead of the system's.
    #[cfg_attr(feature = "cli", arg(long = "nvml.lib-path", value_name = "FILE"))]
    pub nvml_lib_path: Option<PathBuf>,
    /// Scenario file for --backend sim (default: the embedded demo scenario).
    #[cfg_attr(feature = "cli", arg(long = "sim.scenario", value_name = "FILE"))]
    pub sim_scenario: Option<PathBuf>,
    /// Node of the scenario to simulate (default: its first node).
    #[cfg_attr(feature = "cli", arg(long = "sim.node", value_name = "NAME"))]
    pub sim_node: Option<String>,
}

/// Why a backend could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// Flags that do not belong together (e.g. `--sim.node` with `--backend nvml`).
    #[error("{0}")]
    Flags(String),
    #[error(transparent)]
    Device(#[from] DeviceError),
    #[error(transparent)]
    Control(#[from] ControlError),
}

impl From<sim::ScenarioError> for BackendError {
    fn from(e: sim::ScenarioError) -> Self {
        BackendError::Device(e.into())
    }
}

impl BackendSpec {
    /// Refuses flags of the other backend: `--sim.*` with NVML, `--nvml.lib-path` with the
    /// simulator (`extra_sim`: a command's own `--sim.*` flags that were given).
    pub fn check(&self, extra_sim: &[&str]) -> Result<(), BackendError> {
        match self.backend {
            BackendKind::Nvml => {
                let mut given: Vec<&str> = Vec::new();
                if self.sim_scenario.is_some() {
                    given.push("--sim.scenario");
                }
                if self.sim_node.is_some() {
                    given.push("--sim.node");
                }
                given.extend_from_slice(extra_sim);
                if !given.is_empty() {
                    return Err(BackendError::Flags(format!(
                        "{} need(s) --backend sim",
                        given.join(", ")
                    )));
                }
            }
            BackendKind::Sim if self.nvml_lib_path.is_some() => {
                return Err(BackendError::Flags(
                    "--nvml.lib-path needs --backend nvml".into(),
                ));
            }
            BackendKind::Sim => {}
        }
        Ok(())
    }

    /// The scenario of `--backend sim` (`--sim.scenario`, or the embedded demo); `None` for NVML.
    pub fn scenario(&self) -> Result<Option<Scenario>, BackendError> {
        match self.backend {
            BackendKind::Nvml => Ok(None),
            BackendKind::Sim => Ok(Some(sim::load_scenario(self.sim_scenario.as_deref())?)),
        }
    }

    /// The read side's opener, checked now: the flags, the scenario and its node (a typo fails
    /// here, not later in a sampling loop). NVML is not loaded until [`ReaderOpener::open`].
    pub fn reader(&self) -> Result<ReaderOpener, BackendError> {
        self.check(&[])?;
        Ok(match self.scenario()? {
            None => ReaderOpener::Nvml {
                lib: self.nvml_lib_path.clone(),
            },
            Some(scenario) => {
                let node = self.sim_node.clone();
                SimBackend::new(&scenario, node.as_deref(), SimClock::stepped(0, 0))?;
                ReaderOpener::Sim {
                    scenario: Arc::new(scenario),
                    node,
                }
            }
        })
    }

    /// The node's MIG control. `node_name`: the name NVML reports as the node (default: the
    /// host name; not for the simulator, whose node is `--sim.node`). `sim_state`: the file
    /// keeping a simulated node's MIG state between runs; `fail_write`: make the simulator's
    /// Nth write call fail (tests).
    pub fn control(
        &self,
        node_name: Option<&str>,
        sim_state: Option<&Path>,
        fail_write: Option<u64>,
    ) -> Result<Box<dyn MigControl>, BackendError> {
        let extra: &[&str] = if sim_state.is_some() {
            &["--sim.state"]
        } else {
            &[]
        };
        self.check(extra)?;
        match self.scenario()? {
            None => Ok(crate::nvml::open_control(
                self.nvml_lib_path.as_deref(),
                node_name,
            )?),
            Some(scenario) => {
                if node_name.is_some() {
                    return Err(BackendError::Flags(
                        "--node is for --backend nvml; the simulated node is chosen with --sim.node"
                            .into(),
                    ));
                }
                let backend = SimBackend::new(
                    &scenario,
                    self.sim_node.as_deref(),
                    SimClock::stepped(0, 1000),
                )?;
                let mut ctrl = SimMigControl::open(backend.node(), sim_state)?;
                ctrl.fail_write_call(fail_write);
                Ok(Box::new(ctrl))
            }
        }
    }

    /// The node's MIG profile tables: NVML's, or the simulated node's (its models' built-in
    /// tables).
    pub fn profile_reader(&self) -> Result<Box<dyn ProfileReader>, BackendError> {
        Ok(match self.reader()? {
            ReaderOpener::Nvml { lib } => crate::nvml::open_profile_reader(lib.as_deref())?,
            ReaderOpener::Sim { scenario, node } => Box::new(SimBackend::new(
                &scenario,
                node.as_deref(),
                SimClock::stepped(0, 1000),
            )?),
        })
    }
}

/// Opens the read side, again and again (a sampler re-creates its backend after a driver
/// failure): NVML from its library, or a simulated node of a scenario loaded once.
#[derive(Debug, Clone)]
pub enum ReaderOpener {
    Nvml {
        lib: Option<PathBuf>,
    },
    Sim {
        scenario: Arc<Scenario>,
        node: Option<String>,
    },
}

impl ReaderOpener {
    /// The simulator's scenario (`None` for NVML).
    pub fn scenario(&self) -> Option<&Scenario> {
        match self {
            ReaderOpener::Sim { scenario, .. } => Some(scenario),
            ReaderOpener::Nvml { .. } => None,
        }
    }

    /// A backend; `clock` drives the simulator (NVML reads the driver's time).
    pub fn open(&self, clock: SimClock) -> Result<Box<dyn GpuBackend>, DeviceError> {
        match self {
            ReaderOpener::Nvml { lib } => crate::nvml::open_reader(lib.as_deref()),
            ReaderOpener::Sim { scenario, node } => {
                Ok(Box::new(SimBackend::new(scenario, node.as_deref(), clock)?))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sim(node: Option<&str>) -> BackendSpec {
        BackendSpec {
            backend: BackendKind::Sim,
            sim_node: node.map(String::from),
            ..BackendSpec::default()
        }
    }

    #[test]
    fn flags_of_the_other_backend_are_refused_by_name() {
        let nvml = BackendSpec {
            sim_node: Some("n".into()),
            ..BackendSpec::default()
        };
        let e = nvml.check(&["--sim.state"]).unwrap_err().to_string();
        assert_eq!(e, "--sim.node, --sim.state need(s) --backend sim");
        let s = BackendSpec {
            nvml_lib_path: Some("x.so".into()),
            ..sim(None)
        };
        assert_eq!(
            s.check(&[]).unwrap_err().to_string(),
            "--nvml.lib-path needs --backend nvml"
        );
        assert!(sim(None).check(&[]).is_ok());
    }

    #[test]
    fn the_reader_checks_the_simulated_node_before_any_sample() {
        let e = sim(Some("no-such-node")).reader().unwrap_err().to_string();
        assert!(e.contains("no node \"no-such-node\""), "{e}");
        let opener = sim(Some("gpu-node-2")).reader().unwrap();
        assert!(matches!(opener, ReaderOpener::Sim { .. }));
        let mut b = opener.open(SimClock::stepped(0, 1000)).unwrap();
        assert_eq!(b.inventory().unwrap().node, "gpu-node-2");
    }

    #[test]
    fn the_simulated_profile_tables_are_the_builtin_ones() {
        let mut r = sim(None).profile_reader().unwrap();
        assert_eq!(r.backend_name(), "sim");
        let tables = r.profile_tables().unwrap();
        assert!(!tables.is_empty());
        for t in tables {
            let cmp = crate::mig::profile_compare::compare(&t.name, &t.profiles);
            assert!(cmp.matches(), "GPU {}: {cmp:?}", t.gpu);
        }
    }
}
