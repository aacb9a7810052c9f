//! Issue 52 item 4: the weekly report on a schedule, as shipped: the systemd unit
//! (`deploy/systemd/tessera-report.{service,timer}`) and the CronJob with its volume
//! (`deploy/report/`). Their own commands run here, with the demo history for the source and a
//! temporary folder for the archive, and keep HTML and JSON; kustomize renders the CronJob; the
//! unit is as hardened as the exporter's.

use tessera_e2e::{repo_root, run, tessera};

/// The arguments of the unit's `ExecStart=` (after `/usr/bin/tessera`).
fn unit_args() -> Vec<String> {
    let text =
        std::fs::read_to_string(repo_root().join("deploy/systemd/tessera-report.service")).unwrap();
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("ExecStart");
    let mut words = line.split_whitespace();
    assert_eq!(words.next(), Some("/usr/bin/tessera"));
    words.map(str::to_string).collect()
}

/// The CronJob's container arguments.
fn cronjob_args() -> Vec<String> {
    let text = std::fs::read_to_string(repo_root().join("deploy/report/cronjob.yaml")).unwrap();
    let first = text.split("\n---\n").next().unwrap();
    let v: serde_json::Value = serde_yaml_ng::from_str(first).unwrap();
    let c = &v["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["command"][0], "tessera");
    c["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect()
}

/// `args` with the source replaced by the demo history, `--since` by its range, and the archive
/// folder by `dir`; run; the archive's file names.
fn run_with(args: &[String], dir: &std::path::Path) -> Vec<String> {
    let demo = format!(
        "history:{}",
        repo_root().join("fixtures/demo-history").display()
    );
    let mut out: Vec<String> = Vec::new();
    let mut it = args.iter().peekable();
    let mut saw = (false, false);
    while let Some(a) = it.next() {
        let (flag, value) = match a.split_once('=') {
            Some((f, v)) => (f.to_string(), Some(v.to_string())),
            None if a.starts_with("--") && it.peek().is_some_and(|n| !n.starts_with("--")) => {
                (a.clone(), it.next().cloned())
            }
            None => (a.clone(), None),
        };
        let value = match flag.as_str() {
            "--source" => {
                saw.0 = true;
                Some(demo.clone())
            }
            "--since" => Some("2026-11-02T00:00:00Z".into()),
            "--archive" => {
                saw.1 = true;
                Some(dir.display().to_string())
            }
            _ => value,
        };
        out.push(flag);
        out.extend(value);
    }
    assert!(
        saw.0 && saw.1,
        "the command has --source and --archive: {args:?}"
    );
    out.extend(["--until".into(), "2026-11-06T00:00:00Z".into()]);
    let mut cmd = tessera![];
    cmd.args(&out);
    let (o, stdout, stderr) = run(cmd);
    assert!(o.status.success(), "{out:?}: {stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn the_units_and_the_cronjobs_commands_keep_the_report_as_html_and_json() {
    let want = [
        "tessera-report-2026-11-06T0000Z.html",
        "tessera-report-2026-11-06T0000Z.json",
    ];
    for (what, args) in [("unit", unit_args()), ("CronJob", cronjob_args())] {
        assert_eq!(args.first().map(String::as_str), Some("report"), "{what}");
        assert!(
            args.iter().any(|a| a.starts_with("--keep")),
            "{what}: {args:?}"
        );
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(run_with(&args, dir.path()), want, "{what}");
    }
    // On Kubernetes the source is Prometheus (the DaemonSet keeps no history).
    assert!(
        cronjob_args()
            .iter()
            .any(|a| a.starts_with("--source=prometheus:")),
        "{:?}",
        cronjob_args()
    );
}

#[test]
fn kustomize_renders_the_cronjob_and_its_volume_in_the_tessera_namespace() {
    let kubectl = std::env::var("TESSERA_KUBECTL").unwrap_or_else(|_| "kubectl".into());
    let out = std::process::Command::new(&kubectl)
        .arg("kustomize")
        .arg(repo_root().join("deploy/report"))
        .output()
        .unwrap_or_else(|e| panic!("{kubectl}: {e} (scripts/test.sh installs kubectl)"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let kinds: Vec<(String, String)> = text
        .split("\n---\n")
        .map(|d| {
            let v: serde_json::Value = serde_yaml_ng::from_str(d).unwrap();
            (
                v["kind"].as_str().unwrap().to_string(),
                v["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("PersistentVolumeClaim".to_string(), "tessera".to_string()),
            ("CronJob".to_string(), "tessera".to_string()),
        ]
    );
}

#[test]
fn the_report_unit_verifies_and_is_as_hardened_as_the_exporters() {
    let root = repo_root();
    let exposure = |unit: &str| -> f64 {
        let out = std::process::Command::new("systemd-analyze")
            .args(["security", "--offline=true", "--no-pager"])
            .arg(root.join(unit))
            .output()
            .expect("systemd-analyze (scripts/test.sh installs systemd)");
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        text.lines()
            .find(|l| l.contains("Overall exposure level"))
            .and_then(|l| l.rsplit(": ").next())
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no exposure in:\n{text}"))
    };
    let report = exposure("deploy/systemd/tessera-report.service");
    let exporter = exposure("deploy/systemd/tessera-exporter.service");
    assert!(report <= exporter && report < 2.0, "{report} vs {exporter}");
    // The timer parses (the service's binary is not installed here: its line is expected).
    let out = std::process::Command::new("systemd-analyze")
        .arg("verify")
        .arg(root.join("deploy/systemd/tessera-report.timer"))
        .arg(root.join("deploy/systemd/tessera-report.service"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    let problems: Vec<&str> = text
        .lines()
        .filter(|l| !l.contains("/usr/bin/tessera is not executable"))
        .filter(|l| !l.trim().is_empty())
        .collect();
    assert!(problems.is_empty(), "{text}");
}
