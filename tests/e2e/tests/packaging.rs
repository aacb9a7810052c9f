//! What a packaged CLI carries (issue 37 item 4): `--version` with the commit of both binaries,
//! man pages for every command and verb that groff renders, shell completions that the shells
//! accept, and `tessera --help` listing commands by task.

use tessera_e2e::{exporter, run, tessera};

/// The commit `build.rs` should have recorded: HEAD of this checkout, or `unknown` outside git.
fn head() -> String {
    std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

#[test]
fn both_binaries_say_their_version_and_commit() {
    let commit = head();
    let (out, stdout, _) = run(tessera!["--version"]);
    assert!(out.status.success());
    assert_eq!(stdout, format!("tessera 0.1.0 (commit {commit})\n"));
    let (out, stdout, _) = run(exporter!["--version"]);
    assert!(out.status.success());
    assert_eq!(
        stdout,
        format!("tessera-exporter 0.1.0 (commit {commit})\n")
    );
}

#[test]
fn man_pages_for_every_command_render_with_groff() {
    let dir = tempfile::tempdir().expect("tmp");
    let (out, _, err) = run(tessera!["generate", "man", "--out", dir.path()]);
    assert!(out.status.success(), "{err}");
    let mut pages: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    pages.sort();
    for expected in [
        "tessera.1",
        "tessera-report.1",
        "tessera-analyze.1",
        "tessera-mig-plan.1",
        "tessera-replay.1",
        "tessera-mig-apply.1",
        "tessera-share-plan.1",
        "tessera-share-apply.1",
        "tessera-generate.1",
        "tessera-queue-apply.1",
        "tessera-queue-schedule.1",
    ] {
        assert!(pages.iter().any(|p| p == expected), "{expected}: {pages:?}");
    }
    assert!(
        err.contains(&format!("wrote {} man page(s)", pages.len())),
        "{err}"
    );
    // groff renders every page without a warning (a non-ASCII character in a help text is
    // one)...
    for name in &pages {
        let out = std::process::Command::new("groff")
            .args(["-man", "-Tutf8", "-ww"])
            .arg(dir.path().join(name))
            .output()
            .expect("groff (scripts/test.sh installs it)");
        assert!(out.status.success(), "{name}");
        assert!(
            out.stderr.is_empty(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // ... and the page says what the command does.
    let page = dir.path().join("tessera-report.1");
    let out = std::process::Command::new("groff")
        .args(["-man", "-Tutf8", "-ww"])
        .arg(&page)
        .output()
        .expect("groff (scripts/test.sh installs it)");
    // grotty's overstrike bold (`N\x08N`) and underline (`_\x08x`) removed, lines joined.
    let raw = String::from_utf8_lossy(&out.stdout);
    let mut text = String::new();
    for c in raw.chars() {
        if c == '\u{8}' {
            text.pop();
        } else {
            text.push(c);
        }
    }
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(out.status.success());
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("The weekly report: usage, cost"), "{text}");
    assert!(text.contains("--price.gpu-hour"), "{text}");
    let (out, _, err) = run(tessera!["generate", "man"]);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--out"), "{err}");
}

#[test]
fn completions_for_bash_zsh_and_fish() {
    let (out, bash, _) = run(tessera!["generate", "complete-bash"]);
    assert!(out.status.success());
    let check = std::process::Command::new("bash")
        .args(["-n", "-c", &bash])
        .output()
        .expect("bash");
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    assert!(bash.contains("complete -F _tessera"), "{bash}");
    assert!(bash.contains("--prometheus.api"), "{bash}");
    let (_, zsh, _) = run(tessera!["generate", "complete-zsh"]);
    assert!(zsh.starts_with("#compdef tessera"), "{zsh}");
    let (_, fish, _) = run(tessera!["generate", "complete-fish"]);
    assert!(fish.contains("complete -c tessera"), "{fish}");
}

#[test]
fn help_lists_commands_by_task() {
    let (out, help, _) = run(tessera!["--help"]);
    assert!(out.status.success());
    let order = ["Observe:", "Advise:", "Report:", "Plan:", "Apply:"];
    let at: Vec<usize> = order
        .iter()
        .map(|g| help.find(g).unwrap_or_else(|| panic!("{g}: {help}")))
        .collect();
    assert!(at.windows(2).all(|w| w[0] < w[1]), "{help}");
    for line in [
        "    mig plan       Plan MIG layouts",
        "    report         The weekly report",
    ] {
        assert!(help.contains(line), "{line}: {help}");
    }
}

/// `systemd-analyze security`'s overall exposure of a unit file (0 = most locked down, 10 =
/// not at all), read offline (systemd need not run).
fn exposure(unit: &std::path::Path) -> f64 {
    let out = std::process::Command::new("systemd-analyze")
        .args(["security", "--offline=true", "--no-pager"])
        .arg(unit)
        .output()
        .expect("systemd-analyze (Debian's systemd package; scripts/test.sh installs it)");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let line = text
        .lines()
        .find(|l| l.contains("Overall exposure level"))
        .unwrap_or_else(|| panic!("no exposure level in:\n{text}"));
    line.rsplit(": ")
        .next()
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("unreadable exposure: {line}"))
}

/// The notify unit (issue 49, low) is at least as hardened as the exporter's: it needs no device
/// and no other user, so `systemd-analyze security` must rate it no more exposed.
#[test]
fn the_notify_unit_is_as_hardened_as_the_exporters() {
    let root = tessera_e2e::repo_root();
    let notify = exposure(&root.join("deploy/notify/tessera-notify.service"));
    let exporter = exposure(&root.join("deploy/systemd/tessera-exporter.service"));
    assert!(
        notify <= exporter,
        "tessera-notify.service exposure {notify} > tessera-exporter.service {exporter}"
    );
    assert!(notify < 2.0, "tessera-notify.service exposure {notify}");
}
