//! The one way these tests run the `tessera` binary (built by cargo for this test binary, found
//! through `CARGO_BIN_EXE_tessera`): [`tessera`] with the arguments and the environment as is,
//! [`tessera_with`] when a test sets the working folder or the environment; and the simulated
//! 64-GPU fleet several tests read ([`fleet_64`]).

use std::process::{Command, Output};

/// `tessera ARGS`, waited for.
pub fn tessera(args: &[&str]) -> Output {
    tessera_with(args, |_| {})
}

/// `tessera ARGS` after `setup` adjusted the command (folder, environment), waited for.
pub fn tessera_with(args: &[&str], setup: impl FnOnce(&mut Command)) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tessera"));
    cmd.args(args);
    setup(&mut cmd);
    cmd.output().expect("run tessera")
}

/// Exit code (−1 when killed by a signal), stdout and stderr of `tessera ARGS`.
pub fn run(args: &[&str]) -> (i32, String, String) {
    let out = tessera(args);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `tessera simulate` of `fixtures/scenarios/fleet-64.toml` for 2 days (60 s samples, 10-minute
/// rows) into `dir/fleet`; its `history:` source.
pub fn fleet_64(dir: &std::path::Path) -> String {
    let scenario = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/scenarios/fleet-64.toml");
    let history = dir.join("fleet");
    let (code, _, err) = run(&[
        "simulate",
        "--scenario",
        scenario.to_str().unwrap(),
        "--days",
        "2",
        "--sample-interval",
        "60s",
        "--history.interval",
        "10m",
        "--out",
        history.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "simulate: {err}");
    format!("history:{}", history.display())
}

/// `tessera report` of `source` over `since..until` at `interval` in `format`, without the plan
/// replays and the trend (what the work tests look at), with `extra` flags: its stdout, the run
/// asserted successful.
pub fn report(
    source: &str,
    (since, until): (&str, &str),
    interval: &str,
    format: &str,
    extra: &[&str],
) -> String {
    let mut args = vec![
        "report",
        "--source",
        source,
        "--since",
        since,
        "--until",
        until,
        "--interval",
        interval,
        "--format",
        format,
        "--no-replay",
        "--trend.weeks",
        "0",
    ];
    args.extend_from_slice(extra);
    let out = tessera(&args);
    assert!(
        out.status.success(),
        "tessera {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
