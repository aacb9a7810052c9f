//! The Debian packages (issue 37 item 3): `scripts/build-debs.sh` builds `tessera-exporter` and
//! `tessera` with cargo-deb from the binaries the other tests use (debug builds), and the test
//! walks a Slurm or bare-metal admin's path on this machine: `dpkg -i` both, run the installed
//! binaries with `--backend sim` and on the demo history, find the man pages and completions,
//! check the one systemd unit with `systemd-analyze verify` (systemd is not PID 1 here, so the
//! unit is not started), verify the report's and notify's timers and run the report service's
//! command with the installed binary (deploy/README.md's bare-metal path, step 5), then `dpkg
//! -r` (the conffile in /etc/default stays) and `dpkg -P` (everything goes, the enable symlink
//! too).
//!
//! It installs into the real /usr and /etc of this machine, so it needs root (as the image test
//! does) and leaves nothing behind; it purges both packages first in case an earlier run stopped
//! half-way.

use std::path::Path;
use std::process::Command;

use tessera_e2e::{exporter, repo_root, run, target_profile_dir, tessera};

const UNIT: &str = "/usr/lib/systemd/system/tessera-exporter.service";
const WANTS: &str = "/etc/systemd/system/multi-user.target.wants/tessera-exporter.service";
const DEFAULTS: &str = "/etc/default/tessera-exporter";

fn sh(cmd: &str, args: &[&str]) -> (bool, String, String) {
    let (out, stdout, stderr) = run({
        let mut c = Command::new(cmd);
        c.args(args);
        c
    });
    (out.status.success(), stdout, stderr)
}

fn must(cmd: &str, args: &[&str]) -> String {
    let (ok, stdout, stderr) = sh(cmd, args);
    assert!(ok, "{cmd} {args:?} failed:\n{stdout}\n{stderr}");
    stdout
}

/// `dpkg-query`'s status of a package, or `None` when dpkg does not know it.
fn status(package: &str) -> Option<String> {
    let (ok, stdout, _) = sh("dpkg-query", &["-W", "-f=${Status}", package]);
    ok.then_some(stdout).filter(|s| !s.is_empty())
}

/// An installed binary run with nothing of the build around it: a clean environment whose PATH
/// holds only the system's folders.
fn installed(bin: &str, args: &[&str]) -> (bool, String, String) {
    let (out, stdout, stderr) = run({
        let mut c = Command::new(bin);
        c.args(args).env_clear().env("PATH", "/usr/bin:/bin");
        c
    });
    (out.status.success(), stdout, stderr)
}

#[test]
fn both_packages_install_run_and_purge_cleanly() {
    let (_, uid, _) = sh("id", &["-u"]);
    assert_eq!(
        uid.trim(),
        "0",
        "dpkg -i needs root (as the container image test does)"
    );
    // The binaries the other tests use (the macros build them when missing).
    let (_, version, _) = run(tessera!["--version"]);
    let (_, exporter_version, _) = run(exporter!["--version"]);
    let profile = target_profile_dir();
    let profile = profile.file_name().unwrap().to_str().unwrap();
    let out = tempfile::tempdir().unwrap();
    let root = repo_root();
    let out_dir = out.path().to_str().unwrap();
    let _ = sh("dpkg", &["-P", "tessera", "tessera-exporter"]);

    let script = root.join("scripts/build-debs.sh");
    must(
        "bash",
        &[
            script.to_str().unwrap(),
            "--profile",
            profile,
            "--no-build",
            "--fast",
            "--out",
            out_dir,
        ],
    );
    let deb = |name: &str| format!("{out_dir}/{name}_0.1.0-1_amd64.deb");
    for name in ["tessera-exporter", "tessera"] {
        assert!(Path::new(&deb(name)).is_file(), "{}", deb(name));
    }
    let fields = must(
        "dpkg-deb",
        &[
            "-f",
            &deb("tessera-exporter"),
            "Package",
            "Version",
            "Depends",
        ],
    );
    assert!(fields.contains("Package: tessera-exporter"), "{fields}");
    assert!(fields.contains("Version: 0.1.0-1"), "{fields}");
    assert!(fields.contains("libc6"), "{fields}");

    must("dpkg", &["-i", &deb("tessera-exporter"), &deb("tessera")]);
    for name in ["tessera-exporter", "tessera"] {
        assert_eq!(
            status(name).as_deref(),
            Some("install ok installed"),
            "{name}"
        );
    }

    // The installed binaries, with nothing of the build around them.
    let (ok, v, e) = installed("/usr/bin/tessera", &["--version"]);
    assert!(ok, "{e}");
    assert_eq!(v, version);
    let (ok, v, e) = installed("/usr/bin/tessera-exporter", &["--version"]);
    assert!(ok, "{e}");
    assert_eq!(v, exporter_version);
    let (ok, once, e) = installed(
        "/usr/bin/tessera-exporter",
        &["--backend", "sim", "--once", "--history.dir="],
    );
    assert!(ok, "{e}");
    assert!(once.contains("backend sim"), "{once}");
    let demo = format!(
        "history:{}",
        root.join("fixtures/demo-history").to_str().unwrap()
    );
    let (ok, report, e) = installed(
        "/usr/bin/tessera",
        &["report", "--source", &demo, "--format", "json"],
    );
    assert!(ok, "{e}");
    let report: serde_json::Value = serde_json::from_str(&report).unwrap();
    assert!(report["fleet"].is_object(), "{report}");

    // Man pages and completions where man and the shells look for them.
    assert_eq!(
        must("man", &["-w", "tessera-mig-plan"]).trim(),
        "/usr/share/man/man1/tessera-mig-plan.1.gz"
    );
    assert_eq!(
        must("man", &["-w", "tessera-share-apply"]).trim(),
        "/usr/share/man/man1/tessera-share-apply.1.gz"
    );
    let complete = must(
        "bash",
        &[
            "-c",
            "source /usr/share/bash-completion/completions/tessera && complete -p tessera",
        ],
    );
    assert!(complete.contains("tessera"), "{complete}");
    for f in [
        "/usr/share/zsh/vendor-completions/_tessera",
        "/usr/share/fish/vendor_completions.d/tessera.fish",
    ] {
        assert!(Path::new(f).is_file(), "{f}");
    }

    // The one systemd unit: installed, enabled, and valid for systemd (warnings count).
    let unit = std::fs::read_to_string(UNIT).unwrap();
    let shipped =
        std::fs::read_to_string(root.join("deploy/systemd/tessera-exporter.service")).unwrap();
    assert_eq!(unit, shipped, "the package ships deploy/systemd's unit");
    assert!(Path::new(WANTS).exists(), "enabled on install: {WANTS}");
    let (ok, stdout, stderr) = sh("systemd-analyze", &["verify", UNIT]);
    assert!(
        ok && stderr.trim().is_empty(),
        "systemd-analyze verify:\n{stdout}\n{stderr}"
    );
    // The check can fail: the same unit naming a binary that is not there.
    let planted = tempfile::tempdir().unwrap();
    let bad = planted.path().join("tessera-exporter.service");
    std::fs::write(
        &bad,
        unit.replace(
            "ExecStart=/usr/bin/tessera-exporter ",
            "ExecStart=/usr/bin/tessera-exporter-missing ",
        ),
    )
    .unwrap();
    let (ok, _, stderr) = sh("systemd-analyze", &["verify", bad.to_str().unwrap()]);
    assert!(!ok, "a unit whose binary is missing passed: {stderr}");

    // deploy/README.md, "Bare metal", step 5: the report's and notify's services and timers,
    // installed as the step says, verify without a word now that /usr/bin/tessera is there, and
    // the report service's own command, run by the installed binary (the demo history for the
    // exporter's, a temporary folder for the archive), writes the week's report as HTML and JSON.
    let units = tempfile::tempdir().unwrap();
    let mut paths = Vec::new();
    for unit in [
        "deploy/systemd/tessera-report.service",
        "deploy/systemd/tessera-report.timer",
        "deploy/notify/tessera-notify.service",
        "deploy/notify/tessera-notify.timer",
    ] {
        let dest = units.path().join(Path::new(unit).file_name().unwrap());
        std::fs::copy(root.join(unit), &dest).unwrap();
        paths.push(dest.to_str().unwrap().to_string());
    }
    let mut verify = vec!["verify"];
    verify.extend(paths.iter().map(String::as_str));
    let (ok, stdout, stderr) = sh("systemd-analyze", &verify);
    assert!(
        ok && stderr.trim().is_empty(),
        "systemd-analyze verify the timers:\n{stdout}\n{stderr}"
    );
    let service = std::fs::read_to_string(&paths[0]).unwrap();
    let exec = service
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("ExecStart");
    let archive = tempfile::tempdir().unwrap();
    let mut command = exec.to_string();
    for (from, to) in [
        ("history:/var/lib/tessera/history", demo.clone()),
        (
            "/var/lib/tessera/reports",
            archive.path().to_str().unwrap().to_string(),
        ),
        (
            "--since 7d",
            "--since 2026-11-02T00:00:00Z --until 2026-11-06T00:00:00Z".to_string(),
        ),
    ] {
        assert!(command.contains(from), "{from} in {exec}");
        command = command.replace(from, &to);
    }
    let words: Vec<&str> = command.split_whitespace().collect();
    assert_eq!(words[0], "/usr/bin/tessera", "{exec}");
    let (ok, stdout, e) = installed(words[0], &words[1..]);
    assert!(ok && stdout.is_empty(), "{command}: {stdout}{e}");
    let mut written: Vec<String> = std::fs::read_dir(archive.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    written.sort();
    assert_eq!(
        written,
        [
            "tessera-report-2026-11-06T0000Z.html",
            "tessera-report-2026-11-06T0000Z.json"
        ]
    );

    // The flags file is a conffile: a local edit survives `dpkg -r`, `dpkg -P` removes it.
    let conffiles = must("dpkg-query", &["-W", "-f=${Conffiles}", "tessera-exporter"]);
    assert!(conffiles.contains(DEFAULTS), "{conffiles}");
    let defaults = std::fs::read_to_string(DEFAULTS).unwrap();
    assert!(
        defaults.contains("TESSERA_EXPORTER_ARGS=\"--web.listen-address=:19435\""),
        "{defaults}"
    );
    std::fs::write(DEFAULTS, format!("{defaults}# edited here\n")).unwrap();

    must("dpkg", &["-r", "tessera-exporter", "tessera"]);
    for f in ["/usr/bin/tessera-exporter", "/usr/bin/tessera", UNIT] {
        assert!(!Path::new(f).exists(), "{f} left after dpkg -r");
    }
    assert!(
        !Path::new("/usr/share/man/man1/tessera.1.gz").exists(),
        "man page left"
    );
    assert!(
        std::fs::read_to_string(DEFAULTS)
            .unwrap()
            .ends_with("# edited here\n"),
        "dpkg -r keeps the edited conffile"
    );
    assert_eq!(
        status("tessera-exporter").as_deref(),
        Some("deinstall ok config-files")
    );

    must("dpkg", &["-P", "tessera-exporter", "tessera"]);
    assert!(
        !Path::new(DEFAULTS).exists(),
        "dpkg -P removes the conffile"
    );
    assert!(
        std::fs::symlink_metadata(WANTS).is_err(),
        "dpkg -P removes the enable symlink"
    );
    for name in ["tessera-exporter", "tessera"] {
        let s = status(name);
        assert!(
            s.is_none() || s.as_deref() == Some("unknown ok not-installed"),
            "{name}: {s:?}"
        );
    }
}
