//! The one way these tests run the `tessera` binary (built by cargo for this test binary, found
//! through `CARGO_BIN_EXE_tessera`): [`tessera`] with the arguments and the environment as is,
//! [`tessera_with`] when a test sets the working folder or the environment.

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
