//! The fake driver's buffer of per-process utilisation readings, kept by both libraries (the
//! full fake and the "old driver" one): filled as the virtual clock reaches each instant that is
//! read, as a real driver samples on its own; `nvmlDeviceGetProcessUtilization` (the full fake's
//! `extra_exports`) returns the readings newer than the caller's timestamp.
//!
//! It holds no exported symbol and no state of its own (the buffers are the `Fake`'s).

/// How many per-process utilisation readings the fake driver keeps per GPU (the real driver's
/// depth is not documented; the GPU check kit measures it, docs/testing.md).
pub const PROCESS_BUFFER: usize = 120;

/// Keeps the per-process utilisation readings of `reading` (taken at `now_ms`) in each GPU's
/// buffer, (µs, pid, SM %), oldest first, at most [`PROCESS_BUFFER`] per GPU: one per process
/// each time the virtual clock reaches a new instant that is read, as a driver samples on its
/// own; `nvmlDeviceGetProcessUtilization` returns those newer than the caller's timestamp.
pub(crate) fn buffer(
    buffers: &mut std::collections::BTreeMap<u32, std::collections::VecDeque<(u64, u32, u32)>>,
    reading: &tessera_core::sim::NodeReading,
    now_ms: i64,
) {
    let us = (now_ms.max(0) as u64) * 1000;
    for g in &reading.gpus {
        let buffer = buffers.entry(g.sample.index).or_default();
        for p in &g.sample.processes {
            if let Some(sm) = p.sm_ratio {
                buffer.push_back((us, p.pid, (sm * 100.0).round() as u32));
            }
        }
        while buffer.len() > PROCESS_BUFFER {
            buffer.pop_front();
        }
    }
}
