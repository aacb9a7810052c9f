//! A recording of the NVML calls the backend makes, for the GPU check kit (docs/testing.md "On a
//! real GPU"): one JSON line per call with the function, the GPU (and MIG device or GPU
//! instance), the argument that selects what is read, the return code, the value returned and
//! how long the call took; plus one `(sample)` line per [`super::NvmlBackend::sample`] with its
//! whole duration and the sample's timestamp.
//!
//! It is off unless `TESSERA_NVML_TRACE` names a file when the backend is created (the file is
//! appended to, so several processes of one kit run may share a folder but should each name their
//! own file). When off, a traced call costs one relaxed atomic load. Values are what nvml-wrapper
//! returned (its serde form: `MemoryInfo`, `Utilization`, `ProcessInfo`…), before tessera turns
//! them into base units; handles and opaque samples are recorded as `null`.
//!
//! It does not change what any call returns, never fails a read (a write error turns the
//! recording off with one warning), and is not a metric: the exporter serves nothing from it.

use std::cell::Cell;
use std::fs::{File, OpenOptions};
use std::io::{LineWriter, Write};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use nvml_wrapper::error::NvmlError;
use serde::Serialize;

use super::errors::error_kind;

/// The environment variable that names the recording's file.
pub const ENV: &str = "TESSERA_NVML_TRACE";

static ON: AtomicBool = AtomicBool::new(false);
static SINK: Mutex<Option<Sink>> = Mutex::new(None);

struct Sink {
    out: LineWriter<File>,
    start: Instant,
}

thread_local! {
    /// The GPU (and MIG device index) whose reads are in progress on this thread.
    static GPU: Cell<(Option<u32>, Option<u32>)> = const { Cell::new((None, None)) };
}

/// One recorded call.
#[derive(Debug, Serialize)]
struct Line<'a> {
    /// Milliseconds since the recording started.
    t_ms: f64,
    function: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    gpu: Option<u32>,
    /// The MIG device index (below the GPU's maximum MIG device count) being read.
    #[serde(skip_serializing_if = "Option::is_none")]
    mig: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    arg: Option<&'a str>,
    /// `success`, or the error's token ([`error_kind`]).
    rc: &'a str,
    value: serde_json::Value,
    micros: f64,
}

/// Start recording to the file `TESSERA_NVML_TRACE` names, if it names one (once per process;
/// later calls keep the first file).
pub(super) fn start_from_env() {
    let Some(path) = std::env::var_os(ENV).filter(|p| !p.is_empty()) else {
        return;
    };
    let Ok(mut sink) = SINK.lock() else {
        return;
    };
    if sink.is_some() {
        return;
    }
    match OpenOptions::new().create(true).append(true).open(&path) {
        Ok(f) => {
            *sink = Some(Sink {
                out: LineWriter::new(f),
                start: Instant::now(),
            });
            ON.store(true, Ordering::Relaxed);
            log::info!("recording NVML calls to {}", path.to_string_lossy());
        }
        Err(e) => log::warn!(
            "{ENV}: cannot open {} ({e}); NVML calls are not recorded",
            path.to_string_lossy()
        ),
    }
}

/// Whether calls are being recorded.
pub(super) fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Set the GPU (and MIG device index) that the following calls on this thread read.
pub(super) fn set_gpu(gpu: Option<u32>, mig: Option<u32>) {
    GPU.with(|g| g.set((gpu, mig)));
}

fn write(function: &str, arg: Option<&str>, rc: &str, value: serde_json::Value, micros: f64) {
    let Ok(mut sink) = SINK.lock() else {
        return;
    };
    let Some(s) = sink.as_mut() else {
        return;
    };
    let (gpu, mig) = GPU.with(Cell::get);
    let line = Line {
        t_ms: s.start.elapsed().as_secs_f64() * 1e3,
        function,
        gpu,
        mig,
        arg,
        rc,
        value,
        micros,
    };
    let ok = serde_json::to_writer(&mut s.out, &line).is_ok() && s.out.write_all(b"\n").is_ok();
    if !ok {
        log::warn!("{ENV}: writing the recording failed; NVML calls are no longer recorded");
        ON.store(false, Ordering::Relaxed);
        *sink = None;
    }
}

fn outcome<T>(
    r: &Result<T, NvmlError>,
    value: impl FnOnce(&T) -> serde_json::Value,
) -> (&'static str, serde_json::Value) {
    match r {
        Ok(v) => ("success", value(v)),
        Err(e) => (error_kind(e), serde_json::Value::Null),
    }
}

/// Run one NVML call and record it with its value.
pub(super) fn call<T: Serialize>(
    function: &str,
    arg: Option<&str>,
    f: impl FnOnce() -> Result<T, NvmlError>,
) -> Result<T, NvmlError> {
    call_json(function, arg, f, |v| {
        serde_json::to_value(v).unwrap_or(serde_json::Value::Null)
    })
}

/// Run one NVML call and record it with the value `value` makes of what it returned.
pub(super) fn call_json<T>(
    function: &str,
    arg: Option<&str>,
    f: impl FnOnce() -> Result<T, NvmlError>,
    value: impl FnOnce(&T) -> serde_json::Value,
) -> Result<T, NvmlError> {
    if !on() {
        return f();
    }
    let t = Instant::now();
    let r = f();
    let micros = t.elapsed().as_secs_f64() * 1e6;
    let (rc, value) = outcome(&r, value);
    write(function, arg, rc, value, micros);
    r
}

/// Run one NVML call whose value is a handle or an opaque sample, and record it without a value.
pub(super) fn call_opaque<T>(
    function: &str,
    arg: Option<&str>,
    f: impl FnOnce() -> Result<T, NvmlError>,
) -> Result<T, NvmlError> {
    call_json(function, arg, f, |_| serde_json::Value::Null)
}

/// Record the duration of a whole sample of the node (all GPUs) and its timestamp (what the
/// exporter serves as `tessera_exporter_last_sample_timestamp_seconds`).
pub(super) fn sample_done(started: Instant, gpus: usize, timestamp_ms: i64) {
    if on() {
        set_gpu(None, None);
        write(
            "(sample)",
            None,
            "success",
            serde_json::json!({ "gpus": gpus, "timestamp_ms": timestamp_ms }),
            started.elapsed().as_secs_f64() * 1e6,
        );
    }
}
