//! The standard `process_*` metrics of the exporter itself (as every Prometheus client library
//! exports them): resident and virtual memory, CPU time, start time, open and maximum file
//! descriptors. Read from `/proc/self` at render time (once per snapshot through the cache);
//! absent where `/proc` is not available.

use std::fmt;

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Unit;

use super::{Collector, Context, single, single_counter};

/// `process_*` metrics.
pub struct RuntimeCollector;

/// Figures read from `/proc/self`.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct SelfStats {
    pub resident_bytes: Option<f64>,
    pub virtual_bytes: Option<f64>,
    pub cpu_seconds: Option<f64>,
    pub start_time_seconds: Option<f64>,
    pub open_fds: Option<f64>,
    pub max_fds: Option<f64>,
}

fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as f64 } else { 100.0 }
}

fn page_size() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 { p as f64 } else { 4096.0 }
}

/// Read this process's figures from `/proc/self`.
pub fn self_stats() -> SelfStats {
    let mut s = SelfStats::default();
    if let Ok(stat) = std::fs::read_to_string("/proc/self/stat")
        && let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r)
    {
        // Fields after the command: state is field 3, so index 0 here is field 3.
        let f: Vec<&str> = rest.split_whitespace().collect();
        let num = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok());
        let ticks = clock_ticks();
        if let (Some(u), Some(k)) = (num(11), num(12)) {
            s.cpu_seconds = Some((u + k) / ticks);
        }
        s.virtual_bytes = num(20);
        s.resident_bytes = num(21).map(|pages| pages * page_size());
        if let (Some(start), Ok(uptime)) = (num(19), std::fs::read_to_string("/proc/uptime"))
            && let Some(up) = uptime
                .split_whitespace()
                .next()
                .and_then(|u| u.parse::<f64>().ok())
        {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0);
            s.start_time_seconds = Some((now - up + start / ticks).round());
        }
    }
    if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
        s.open_fds = Some(dir.count() as f64);
    }
    if let Ok(limits) = std::fs::read_to_string("/proc/self/limits") {
        s.max_fds = limits
            .lines()
            .find(|l| l.starts_with("Max open files"))
            .and_then(|l| l.split_whitespace().nth(3))
            .and_then(|v| v.parse().ok());
    }
    s
}

impl Collector for RuntimeCollector {
    fn name(&self) -> &'static str {
        "runtime"
    }

    fn collect(&self, ctx: &Context<'_>, enc: &mut DescriptorEncoder<'_>) -> fmt::Result {
        if !ctx.options.runtime {
            return Ok(());
        }
        let s = self_stats();
        let gauges = [
            (
                "process_resident_memory",
                "Resident memory size.",
                Some(Unit::Bytes),
                s.resident_bytes,
            ),
            (
                "process_virtual_memory",
                "Virtual memory size.",
                Some(Unit::Bytes),
                s.virtual_bytes,
            ),
            (
                "process_start_time",
                "Start time of the process since the unix epoch.",
                Some(Unit::Seconds),
                s.start_time_seconds,
            ),
            (
                "process_open_fds",
                "Number of open file descriptors.",
                None,
                s.open_fds,
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors.",
                None,
                s.max_fds,
            ),
        ];
        if let Some(cpu) = s.cpu_seconds {
            single_counter(
                enc,
                "process_cpu",
                "User and system CPU time spent.",
                Some(Unit::Seconds),
                cpu,
            )?;
        }
        for (name, help, unit, value) in gauges {
            if let Some(v) = value {
                single(enc, name, help, unit, v)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_its_own_figures() {
        let s = self_stats();
        assert!(s.resident_bytes.unwrap() > 1e5);
        assert!(s.open_fds.unwrap() >= 3.0);
        assert!(s.max_fds.unwrap() >= s.open_fds.unwrap());
        assert!(s.start_time_seconds.unwrap() > 1.6e9);
    }
}
