//! The one logger of the exporter's test binary: every record at `info` and above, kept in
//! memory for the tests that check what is logged (`log` allows one logger per process, and the
//! tests of all modules share this binary). Tests filter by a needle of their own (a path, a
//! folder) so that parallel tests do not see each other's lines.

use std::sync::{Mutex, OnceLock};

static LINES: OnceLock<Mutex<Vec<(log::Level, String)>>> = OnceLock::new();

struct Capture;

impl log::Log for Capture {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::Level::Info
    }
    fn log(&self, r: &log::Record<'_>) {
        if self.enabled(r.metadata())
            && let Some(lines) = LINES.get()
        {
            lines
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((r.level(), r.args().to_string()));
        }
    }
    fn flush(&self) {}
}

/// Installs the logger (once per process).
pub fn install() {
    static INIT: std::sync::Once = std::sync::Once::new();
    INIT.call_once(|| {
        let _ = LINES.set(Mutex::new(Vec::new()));
        log::set_logger(&Capture).expect("the only logger of this test binary");
        log::set_max_level(log::LevelFilter::Info);
    });
}

/// Every line logged so far at `level` or more severe, as `LEVEL message`.
pub fn lines(level: log::Level) -> Vec<String> {
    install();
    LINES
        .get()
        .map(|l| {
            l.lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .filter(|(lv, _)| *lv <= level)
                .map(|(lv, m)| format!("{lv} {m}"))
                .collect()
        })
        .unwrap_or_default()
}
