//! The recording and the replay cursor: a `TESSERA_NVML_TRACE` file (one JSON line per NVML call
//! of tessera's backend, `core/src/nvml/trace.rs`) cut into segments at each
//! `nvmlDeviceGetCount_v2` call, and the rule that picks the recorded answer to a call.
//!
//! Replay rule: the library's k-th `nvmlDeviceGetCount_v2` call moves to the recording's k-th
//! segment (the last one once the recording is used up, so a longer run keeps answering as the
//! last sample did). A call is answered by the next unused recorded call of the segment with the
//! same function, GPU, MIG device and argument; failing that, the last such call; failing that,
//! one with the same function, GPU and MIG device whatever its argument; then the same search in
//! earlier segments, then in later ones. No recorded answer → `NVML_ERROR_NOT_SUPPORTED` and one line on stderr.
//!
//! It makes no decision about C structures: `crate` writes the values out.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use serde::Deserialize;
use serde_json::Value;

/// The file the library replays.
pub const ENV: &str = "TESSERA_FAKE_NVML_RECORDING";
/// Keep only the first N whole samples of the recording (the "(sample)" lines): the state a scrape
/// served when the recording held N samples.
pub const ENV_SAMPLES: &str = "TESSERA_FAKE_NVML_RECORDING_SAMPLES";

/// One recorded call.
#[derive(Debug, Clone, Deserialize)]
pub struct Call {
    pub function: String,
    #[serde(default)]
    pub gpu: Option<u32>,
    #[serde(default)]
    pub mig: Option<u32>,
    #[serde(default)]
    pub arg: Option<String>,
    pub rc: String,
    #[serde(default)]
    pub value: Value,
}

/// Function, GPU, MIG device and argument of a call.
type Key = (String, Option<u32>, Option<u32>, Option<String>);

#[derive(Debug, Default)]
pub struct Replay {
    pub loaded: bool,
    segments: Vec<Vec<Call>>,
    /// Segment in use (0: before the first device count).
    pos: usize,
    /// Calls of the current segment already given, per key.
    used: HashMap<Key, usize>,
    pub init_count: u32,
    /// Calls nobody recorded an answer for, reported once each.
    unanswered: std::collections::BTreeSet<String>,
}

static REPLAY: Mutex<Option<Replay>> = Mutex::new(None);

pub fn lock() -> MutexGuard<'static, Option<Replay>> {
    REPLAY.lock().unwrap_or_else(|e| e.into_inner())
}

/// Parse a recording; `samples` keeps the first N whole samples.
pub fn parse(text: &str, samples: Option<usize>) -> Result<Replay, String> {
    let mut segments: Vec<Vec<Call>> = vec![Vec::new()];
    let mut whole = 0usize;
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let call: Call = serde_json::from_str(line)
            .map_err(|e| format!("line {}: not a recorded NVML call ({e})", n + 1))?;
        if call.function == "(sample)" {
            whole += 1;
            if samples.is_some_and(|k| whole >= k) {
                break;
            }
            continue;
        }
        if call.function == "nvmlDeviceGetCount_v2" {
            segments.push(Vec::new());
        }
        if let Some(last) = segments.last_mut() {
            last.push(call);
        }
    }
    if segments.iter().all(Vec::is_empty) {
        return Err("the recording holds no NVML call".into());
    }
    Ok(Replay {
        loaded: true,
        segments,
        ..Replay::default()
    })
}

/// Load the recording `TESSERA_FAKE_NVML_RECORDING` names.
pub fn load_from_env() -> Result<Replay, String> {
    let path = std::env::var(ENV).map_err(|_| format!("{ENV} is not set"))?;
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{ENV}={path}: {e}"))?;
    let samples = match std::env::var(ENV_SAMPLES) {
        Ok(s) => Some(
            s.parse::<usize>()
                .map_err(|_| format!("{ENV_SAMPLES}={s}: expected a whole number"))?,
        ),
        Err(_) => None,
    };
    parse(&text, samples).map_err(|e| format!("{path}: {e}"))
}

impl Replay {
    /// A device count call: move to the next segment.
    pub fn next_segment(&mut self) {
        if self.pos + 1 < self.segments.len() {
            self.pos += 1;
        }
        self.used.clear();
    }

    /// The answer [`Replay::answer`] would give, without using it up (the count-only first call
    /// of a list).
    pub fn peek(
        &mut self,
        function: &str,
        gpu: Option<u32>,
        mig: Option<u32>,
        arg: Option<&str>,
    ) -> Option<Call> {
        let used = self.used.clone();
        let c = self.answer(function, gpu, mig, arg);
        self.used = used;
        c
    }

    /// The last recorded call of `function` with `arg` on any GPU, in this segment or an earlier
    /// one (a process name: asked per pid, recorded under the GPU that listed it).
    pub fn any_gpu(&mut self, function: &str, arg: &str) -> Option<Call> {
        let hit = |c: &&Call| c.function == function && c.arg.as_deref() == Some(arg);
        let found = self.segments[..=self.pos]
            .iter()
            .rev()
            .find_map(|seg| seg.iter().rev().find(hit).cloned());
        if found.is_none() {
            let what = format!("{function} arg={arg:?}");
            if self.unanswered.insert(what.clone()) {
                eprintln!("tessera recorded NVML: no recorded answer to {what}; NOT_SUPPORTED");
            }
        }
        found
    }

    /// The recorded answer to a call (see the module docs).
    pub fn answer(
        &mut self,
        function: &str,
        gpu: Option<u32>,
        mig: Option<u32>,
        arg: Option<&str>,
    ) -> Option<Call> {
        let key = (function.to_string(), gpu, mig, arg.map(str::to_string));
        let same = |c: &Call| c.function == function && c.gpu == gpu && c.mig == mig;
        let exact = |c: &Call| same(c) && c.arg.as_deref() == arg;
        let seg = &self.segments[self.pos];
        let matches: Vec<&Call> = seg.iter().filter(|c| exact(c)).collect();
        if !matches.is_empty() {
            let n = self.used.entry(key).or_insert(0);
            let pick = matches[(*n).min(matches.len() - 1)].clone();
            *n += 1;
            return Some(pick);
        }
        if let Some(c) = seg.iter().rev().find(|c| same(c)) {
            return Some(c.clone());
        }
        // Earlier segments, newest first; then later ones (a call made before the backend first
        // counted the GPUs, e.g. by nvml-wrapper itself, untraced).
        let order = self.segments[..self.pos]
            .iter()
            .rev()
            .chain(self.segments[self.pos + 1..].iter());
        for seg in order {
            if let Some(c) = seg.iter().rev().find(|c| exact(c)) {
                return Some(c.clone());
            }
            if let Some(c) = seg.iter().rev().find(|c| same(c)) {
                return Some(c.clone());
            }
        }
        let what = format!(
            "{function} gpu={gpu:?} mig={mig:?} arg={arg:?} (recorded sample segment {})",
            self.pos
        );
        if self.unanswered.insert(what.clone()) {
            eprintln!("tessera recorded NVML: no recorded answer to {what}; NOT_SUPPORTED");
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REC: &str = r#"{"function":"nvmlInit_v2","rc":"success","value":null}
{"function":"nvmlDeviceGetCount_v2","rc":"success","value":1}
{"function":"nvmlDeviceGetPowerUsage","gpu":0,"rc":"success","value":100}
{"function":"nvmlDeviceGetClockInfo","gpu":0,"arg":"sm","rc":"success","value":1980}
{"function":"(sample)","rc":"success","value":{"gpus":1}}
{"function":"nvmlDeviceGetCount_v2","rc":"success","value":1}
{"function":"nvmlDeviceGetPowerUsage","gpu":0,"rc":"success","value":200}
{"function":"(sample)","rc":"success","value":{"gpus":1}}
"#;

    #[test]
    fn each_device_count_moves_to_the_next_recorded_sample_and_the_last_one_stays() {
        let mut r = parse(REC, None).unwrap();
        r.next_segment();
        assert_eq!(
            r.answer("nvmlDeviceGetPowerUsage", Some(0), None, None)
                .unwrap()
                .value,
            100
        );
        r.next_segment();
        assert_eq!(
            r.answer("nvmlDeviceGetPowerUsage", Some(0), None, None)
                .unwrap()
                .value,
            200
        );
        // Not read in the second sample: the first sample's answer.
        assert_eq!(
            r.answer("nvmlDeviceGetClockInfo", Some(0), None, Some("sm"))
                .unwrap()
                .value,
            1980
        );
        r.next_segment();
        assert_eq!(
            r.answer("nvmlDeviceGetPowerUsage", Some(0), None, None)
                .unwrap()
                .value,
            200
        );
        assert!(
            r.answer("nvmlDeviceGetPowerUsage", Some(1), None, None)
                .is_none()
        );
    }

    #[test]
    fn the_samples_limit_keeps_the_first_whole_samples() {
        let mut r = parse(REC, Some(1)).unwrap();
        r.next_segment();
        r.next_segment();
        assert_eq!(
            r.answer("nvmlDeviceGetPowerUsage", Some(0), None, None)
                .unwrap()
                .value,
            100
        );
    }

    #[test]
    fn a_line_that_is_no_call_is_an_error_with_its_number() {
        let e = parse("{\"function\":\"x\",\"rc\":\"success\"}\nnot json\n", None).unwrap_err();
        assert!(e.starts_with("line 2:"), "{e}");
    }
}
