//! What the simulated backend carries between reads of the slow counters (the energy counter and
//! per-process utilisation, [`crate::device::SlowReads`]), so it follows the NVML backend's call
//! pattern: a sample that carries reports the energy and per-process SM utilisation of the last
//! read and no readings; a sample that reads reports every per-process reading made since the
//! previous read, as NVML's per-process buffer gives them.
//!
//! It holds one GPU's state and does no simulation itself: the readings come from
//! [`super::SimNode`] every sample, as a driver samples on its own.

use std::collections::BTreeMap;

use crate::device::SlowReads;
use crate::model::{GpuSample, GpuStatus};

/// One GPU's carried values and its buffer of per-process readings not yet read.
#[derive(Debug, Default, Clone)]
pub struct SlowCarry {
    /// The energy counter and the newest SM utilisation per pid at the last read; `None` before
    /// the first read and after the GPU was lost.
    read: Option<(Option<f64>, BTreeMap<u32, f64>)>,
    /// Per-process readings since the last read, oldest first (the driver's buffer).
    buffer: BTreeMap<u32, Vec<f64>>,
}

impl SlowCarry {
    /// Apply `slow` to a freshly simulated sample of this GPU: buffer its per-process readings,
    /// then either hand them out (a read) or report the last read's values (a carry).
    pub fn apply(&mut self, slow: SlowReads, s: &mut GpuSample) {
        if s.status == GpuStatus::Lost {
            *self = SlowCarry::default();
            return;
        }
        for p in &s.processes {
            if let Some(v) = p.sm_ratio {
                self.buffer.entry(p.pid).or_default().push(v);
            }
        }
        // Readings of processes that are gone cannot be given to a process of a sample.
        self.buffer
            .retain(|pid, _| s.processes.iter().any(|p| p.pid == *pid));
        match (&self.read, slow) {
            (Some((energy, sm)), SlowReads::Carry) => {
                s.energy_joules = *energy;
                for p in &mut s.processes {
                    p.sm_ratio = sm.get(&p.pid).copied();
                    p.sm_readings.clear();
                }
            }
            _ => {
                let mut newest = BTreeMap::new();
                for p in &mut s.processes {
                    p.sm_readings = self.buffer.remove(&p.pid).unwrap_or_default();
                    if let Some(v) = p.sm_ratio {
                        newest.insert(p.pid, v);
                    }
                }
                self.read = Some((s.energy_joules, newest));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ProcessSample;

    fn sample(energy: f64, sm: f64) -> GpuSample {
        let mut s = GpuSample::empty(0, "GPU-0", GpuStatus::Ok);
        s.energy_joules = Some(energy);
        s.processes = vec![ProcessSample {
            pid: 7,
            name: None,
            used_memory_bytes: None,
            sm_ratio: Some(sm),
            gpu_instance_id: None,
            compute_instance_id: None,
            sm_readings: Vec::new(),
        }];
        s
    }

    #[test]
    fn a_carry_reports_the_last_read_and_a_read_hands_out_every_reading_since() {
        let mut c = SlowCarry::default();
        // Nothing to carry yet: read whatever was asked.
        let mut a = sample(10.0, 0.1);
        c.apply(SlowReads::Carry, &mut a);
        assert_eq!(a.energy_joules, Some(10.0));
        assert_eq!(a.processes[0].sm_readings, vec![0.1]);
        let mut b = sample(20.0, 0.2);
        c.apply(SlowReads::Carry, &mut b);
        assert_eq!(b.energy_joules, Some(10.0));
        assert_eq!(b.processes[0].sm_ratio, Some(0.1));
        assert!(b.processes[0].sm_readings.is_empty());
        let mut d = sample(30.0, 0.3);
        c.apply(SlowReads::Read, &mut d);
        assert_eq!(d.energy_joules, Some(30.0));
        assert_eq!(d.processes[0].sm_ratio, Some(0.3));
        assert_eq!(d.processes[0].sm_readings, vec![0.2, 0.3]);
        // A lost GPU forgets: the next sample reads.
        let mut lost = GpuSample::empty(0, "GPU-0", GpuStatus::Lost);
        c.apply(SlowReads::Carry, &mut lost);
        let mut e = sample(50.0, 0.5);
        c.apply(SlowReads::Carry, &mut e);
        assert_eq!(e.energy_joules, Some(50.0));
        assert_eq!(e.processes[0].sm_readings, vec![0.5]);
    }
}
