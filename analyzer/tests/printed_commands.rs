//! Every command tessera prints runs as printed (issue 48). The outputs of `report` (table,
//! Markdown, HTML, JSON, `--out-of-sample`), `analyze` (table, JSON), `mig plan` (table, JSON,
//! the schedule's cron lines and systemd service, printed and written), `replay` (table, JSON), `share plan`, `job` and `notify --dry-run`
//! on the demo history and on a simulated 64-GPU fleet are parsed for the `tessera …` commands
//! they suggest — backticked in text, `<code>` in HTML, `command` fields and backticked text in
//! JSON, the cron lines' and `ExecStart=`'s command — and each is run by `sh -c` exactly as
//! printed, with the binary under test first on `PATH`, in the folder the outputs were made in,
//! each distinct command once in the order printed (a plan an earlier command wrote is there for
//! a later one). It must exit 0.
//!
//! A command that would act (`--yes`) runs as its dry run, without `--yes`. What a printed
//! command needs besides itself is given the way a user's machine gives it, never by changing
//! the command: `mig apply` (which acts on the node it runs on) without a `--backend` gets the
//! simulated node of the fleet's scenario (`--backend sim --sim.scenario … --sim.state …`)
//! appended, as a GPU node gives NVML; `share apply` finds a fake Kubernetes API through `KUBECONFIG`. A cron line's
//! or unit's program is an absolute path (where the package installs tessera): it must name a
//! `tessera`, and the binary under test runs in its place.
//!
//! On the demo the test also asserts the kinds of command found (`mig plan`, `mig apply`,
//! `replay`, `analyze`, `share plan`, `notify`, and scheduled applies), so that printing fewer
//! commands cannot pass it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use fake_kube::FakeKube;
use serde_json::Value;
use tempfile::TempDir;

use super::support::cli::tessera_with;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .unwrap()
}

/// A command found in an output: where, and the command line as printed.
#[derive(Debug, Clone)]
struct Found {
    output: String,
    line: String,
    /// From a cron line or a unit: the program is an absolute path.
    scheduled: bool,
}

/// `` `tessera …` `` spans of a text.
fn backticked(text: &str) -> Vec<String> {
    let parts: Vec<&str> = text.split('`').collect();
    // Odd parts are inside backticks (an unpaired last one is not).
    (1..parts.len().saturating_sub(1))
        .step_by(2)
        .map(|i| parts[i])
        .filter(|s| s.starts_with("tessera "))
        .map(str::to_string)
        .collect()
}

/// `<code>tessera …</code>` of an HTML page, unescaped.
fn html_code(html: &str) -> Vec<String> {
    html.split("<code>")
        .skip(1)
        .filter_map(|s| s.split_once("</code>").map(|(c, _)| c))
        .map(|c| {
            c.replace("&lt;", "<")
                .replace("&gt;", ">")
                .replace("&quot;", "\"")
                .replace("&#39;", "'")
                .replace("&amp;", "&")
        })
        .filter(|s| s.starts_with("tessera "))
        .collect()
}

/// Every `command` field and every backticked command in any string of a JSON value.
fn json_commands(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.extend(backticked(s)),
        Value::Array(a) => a.iter().for_each(|x| json_commands(x, out)),
        Value::Object(m) => {
            for (k, x) in m {
                match (k.as_str(), x) {
                    ("command", Value::String(s)) => {
                        assert!(s.starts_with("tessera "), "a command field: {s:?}");
                        out.push(s.clone());
                    }
                    _ => json_commands(x, out),
                }
            }
        }
        _ => {}
    }
}

/// The commands of a cron file (after the five time fields and the user; without the comment).
fn cron_commands(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with("CRON_TZ="))
        .map(|l| {
            let l = l.split_once(" #").map_or(l, |(c, _)| c).trim();
            let fields: Vec<&str> = l.splitn(7, ' ').collect();
            assert_eq!(fields.len(), 7, "a cron line with a user: {l:?}");
            fields[6].trim().to_string()
        })
        .collect()
}

/// `ExecStart=` commands of a systemd unit.
fn exec_starts(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("ExecStart="))
        .map(|s| s.trim().to_string())
        .collect()
}

/// What running the collected commands needs: the folder, the simulated node for `mig apply`,
/// the fake cluster for `share apply`.
struct Env {
    dir: TempDir,
    scenario: PathBuf,
    node: String,
    _kube: FakeKube,
    kubeconfig: PathBuf,
}

impl Env {
    /// A folder, a fake cluster whose GPU nodes are `nodes` (name, GPUs) with the device plugin
    /// and its ConfigMap, and the scenario `mig apply` simulates (its node `node`).
    fn new(scenario: &Path, node: &str, nodes: &[(&str, u32)]) -> Env {
        let dir = TempDir::new().unwrap();
        let kube = FakeKube::start();
        for (n, gpus) in nodes {
            kube.add_gpu_node(n, *gpus, &[]);
        }
        kube.set_device_plugin_config(Some("device-plugin-configs"), Some("any"));
        kube.put_configmap(
            "gpu-operator",
            "device-plugin-configs",
            &[("any", "version: v1\n")],
        );
        let kubeconfig = dir.path().join("kubeconfig");
        kube.write_kubeconfig(&kubeconfig);
        Env {
            dir,
            scenario: scenario.to_path_buf(),
            node: node.to_string(),
            _kube: kube,
            kubeconfig,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `tessera ARGS` in the folder; stdout and stderr (it must succeed).
    fn tessera(&self, args: &[&str]) -> (String, String) {
        let out = tessera_with(args, |c| {
            c.current_dir(self.dir.path()).env_remove("NO_COLOR");
        });
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        );
        assert!(out.status.success(), "tessera {args:?} failed: {stderr}");
        (stdout, stderr)
    }

    /// Runs `args`, returns the commands printed on stdout and stderr (backticked; `json`: the
    /// stdout parsed as JSON).
    fn collect(&self, found: &mut Vec<Found>, args: &[&str], json: bool) {
        let (stdout, stderr) = self.tessera(args);
        let mut cmds = backticked(&stderr);
        if json {
            let v: Value = serde_json::from_str(&stdout)
                .unwrap_or_else(|e| panic!("tessera {args:?}: not JSON ({e}): {stdout}"));
            json_commands(&v, &mut cmds);
        } else {
            cmds.extend(backticked(&stdout));
        }
        let output = format!("tessera {}", args.join(" "));
        found.extend(cmds.into_iter().map(|line| Found {
            output: output.clone(),
            line,
            scheduled: false,
        }));
        // Cron lines and units printed in a text output (`mig plan` without --schedule-units).
        if !json {
            let cron: String = stdout
                .lines()
                .filter(|l| l.split(' ').nth(5) == Some("root"))
                .map(|l| format!("{l}\n"))
                .collect();
            let scheduled = cron_commands(&cron).into_iter().chain(exec_starts(&stdout));
            found.extend(scheduled.map(|line| Found {
                output: output.clone(),
                line,
                scheduled: true,
            }));
        }
    }

    /// Runs one found command as printed; its failure as a line, or `None`. A command that acts
    /// on a cluster only on fresh evidence (`scale-down`, `share apply`) runs on a clock a
    /// minute after `data_end` (libfaketime), as on the machine of a user whose data is current.
    fn run(&self, f: &Found, state: usize, data_end: &str) -> Option<String> {
        let bin = Path::new(env!("CARGO_BIN_EXE_tessera"));
        let mut line = f.line.clone();
        if f.scheduled {
            // The unit names where tessera is installed; the binary under test runs there.
            let (program, rest) = line.split_once(' ').expect("a program and its arguments");
            assert!(
                program.starts_with('/') && program.ends_with("/tessera"),
                "{}: a scheduled command runs an installed tessera: {program:?}",
                f.output
            );
            line = format!("tessera {rest}");
        }
        // What would act runs as its dry run (the same command without --yes: the steps, the
        // diff, the refusals), so the test changes no node and no cluster.
        line = line
            .split(' ')
            .filter(|w| *w != "--yes")
            .collect::<Vec<_>>()
            .join(" ");
        // The node `mig apply` acts on: the simulated one, as a GPU node gives NVML.
        if line.starts_with("tessera mig apply ") && !line.contains(" --backend ") {
            line.push_str(&format!(
                " --backend sim --sim.scenario {} --sim.node {} --sim.state {}",
                self.scenario.display(),
                self.node,
                self.path(&format!("node-{state}.json")).display()
            ));
        }
        let path = format!(
            "{}:{}",
            bin.parent().unwrap().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let fresh_only =
            line.starts_with("tessera scale-down ") || line.starts_with("tessera share apply ");
        let clock = chrono::DateTime::parse_from_rfc3339(data_end)
            .map(|t| t.with_timezone(&chrono::Utc) + chrono::Duration::seconds(60))
            .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
            .expect("the analysis' end, RFC 3339");
        let mut cmd = Command::new(if fresh_only { "faketime" } else { "sh" });
        if fresh_only {
            // libfaketime (scripts/test.sh installs it): the wall clock only.
            cmd.arg(&clock)
                .env("TZ", "UTC")
                .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
        }
        let out = cmd
            .args(["sh", "-c", &line][usize::from(!fresh_only)..].iter())
            .current_dir(self.dir.path())
            .env("PATH", path)
            .env("KUBECONFIG", &self.kubeconfig)
            .env_remove("NO_COLOR")
            .output()
            .expect("sh runs");
        (!out.status.success()).then(|| {
            format!(
                "from `{}`: `{}` exited {:?}: {}",
                f.output,
                f.line,
                out.status.code(),
                String::from_utf8_lossy(&out.stderr).trim()
            )
        })
    }
}

/// The kind of a command: `mig plan`, `share apply`, `replay`, …
fn kind(line: &str) -> String {
    let words: Vec<&str> = line.split_whitespace().skip(1).take(2).collect();
    match words.as_slice() {
        ["mig" | "share" | "scenario", verb, ..] => format!("{} {verb}", words[0]),
        [w, ..] => w.to_string(),
        [] => String::new(),
    }
}

/// Makes every output on `source`, collects the commands they print, runs each in the order
/// found (per output, in the output's folder) and returns what was found. Panics listing every
/// command that failed.
fn run_every_printed_command(env: &Env, source: &str, job: Option<&str>) -> Vec<Found> {
    run_printed_commands(env, source, job, false)
}

/// As [`run_every_printed_command`]; with `mig_only`, only `tessera mig plan`'s outputs (its
/// table, JSON, the schedule's cron lines and service) for a source without consolidation moves.
fn run_printed_commands(env: &Env, source: &str, job: Option<&str>, mig_only: bool) -> Vec<Found> {
    let src = ["--source", source];
    let with = |args: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        v.extend(src.iter().map(|s| s.to_string()));
        v
    };
    let mut found = Vec::new();
    let mut run = |args: Vec<String>, json: bool| {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        env.collect(&mut found, &a, json);
    };
    if !mig_only {
        run(with(&["report"]), false);
        run(with(&["report", "--format", "markdown"]), false);
        run(with(&["report", "--format", "json"]), true);
        run(with(&["report", "--out-of-sample"]), false);
        // The consolidation moves left after the actions that come first (none on a fleet whose
        // consolidation groups are all scaled to zero: then no step reads the file).
        let moves = env.path("moves.yaml");
        let out = tessera_with(
            &with(&["analyze", "--plan-out", moves.to_str().unwrap()])
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
            |c| {
                c.current_dir(env.dir.path());
            },
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() || stderr.contains("no consolidation move left"),
            "analyze --plan-out: {stderr}"
        );
        run(with(&["analyze"]), false);
        run(with(&["analyze", "--format", "json"]), true);
    }
    let mp = [
        "mig",
        "plan",
        "-o",
        "mig.yaml",
        "--schedule",
        "schedule.yaml",
    ];
    run(with(&mp), false);
    run(with(&[&mp[..], &["--format", "json"]].concat()), true);
    run(with(&["replay", "--plan", "mig.yaml"]), false);
    run(
        with(&["replay", "--plan", "mig.yaml", "--format", "json"]),
        true,
    );
    if !mig_only {
        if env.path("moves.yaml").exists() {
            run(with(&["replay", "--plan", "moves.yaml"]), false);
            run(with(&["share", "plan", "--plan", "moves.yaml"]), false);
        }
        run(with(&["notify", "--dry-run"]), true);
        if let Some(id) = job {
            run(with(&["job", id]), false);
            run(with(&["job", id, "--format", "json"]), true);
        }
        // HTML: the page's <code> commands.
        let html = env.path("report.html");
        env.tessera(&[
            "report",
            "--source",
            source,
            "--format",
            "html",
            "--out",
            html.to_str().unwrap(),
        ]);
        let page = std::fs::read_to_string(&html).unwrap();
        found.extend(html_code(&page).into_iter().map(|line| Found {
            output: "tessera report --format html".into(),
            line,
            scheduled: false,
        }));
    }
    // The schedule's cron lines and service, written to a folder.
    env.tessera(
        &with(&[&mp[..], &["--schedule-units", "units"]].concat())
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    let units = env.path("units");
    if units.exists() {
        for (file, cmds) in [
            (
                "tessera-mig-schedule.cron",
                cron_commands(
                    &std::fs::read_to_string(units.join("tessera-mig-schedule.cron")).unwrap(),
                ),
            ),
            (
                "tessera-mig-schedule.service",
                exec_starts(
                    &std::fs::read_to_string(units.join("tessera-mig-schedule.service")).unwrap(),
                ),
            ),
        ] {
            found.extend(cmds.into_iter().map(|line| Found {
                output: file.into(),
                line,
                scheduled: true,
            }));
        }
    }
    assert!(!found.is_empty(), "no output printed a command");
    // Where the data ends (the clock of the commands that need fresh evidence).
    let (analysis, _) = env.tessera(&["analyze", "--source", source, "--format", "json"]);
    let analysis: Value = serde_json::from_str(&analysis).expect("analyze's JSON");
    let data_end = analysis["until"]
        .as_str()
        .expect("an analysed range")
        .to_string();
    // Each distinct command once, where it was first printed (a plan before what reads it).
    let mut seen = BTreeSet::new();
    let failures: Vec<String> = found
        .iter()
        .filter(|f| seen.insert((f.scheduled, f.line.clone())))
        .enumerate()
        .filter_map(|(i, f)| env.run(f, i, &data_end))
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} printed command(s) fail as printed:\n{}",
        failures.len(),
        found.len(),
        failures.join("\n")
    );
    found
}

#[test]
fn every_command_printed_on_the_demo_runs_as_printed() {
    let root = root();
    let demo = format!("history:{}", root.join("fixtures/demo-history").display());
    let env = Env::new(
        &root.join("fixtures/scenarios/report-demo.toml"),
        "lab-a",
        &[("lab-a", 4), ("lab-b", 4)],
    );
    let found = run_every_printed_command(&env, &demo, Some("81234"));
    // Printing fewer commands does not pass: the kinds the demo's outputs suggest.
    let kinds: BTreeSet<String> = found.iter().map(|f| kind(&f.line)).collect();
    for k in [
        "analyze",
        "replay",
        "share plan",
        "mig plan",
        "mig apply",
        "notify",
    ] {
        assert!(kinds.contains(k), "no `tessera {k}` printed: {kinds:?}");
    }
    // The report names the source it was given in the commands that read telemetry.
    for f in found
        .iter()
        .filter(|f| f.output.starts_with("tessera report"))
    {
        if !f.line.starts_with("tessera mig apply") {
            assert!(f.line.contains(&demo), "{f:?}");
        }
    }
    // Every output format of the report suggests the same commands.
    let of = |o: &str| -> BTreeSet<&str> {
        found
            .iter()
            .filter(|f| f.output.starts_with("tessera report") && f.output.contains(o))
            .map(|f| f.line.as_str())
            .collect()
    };
    let table: BTreeSet<&str> = found
        .iter()
        .filter(|f| f.output == format!("tessera report --source {demo}"))
        .map(|f| f.line.as_str())
        .collect();
    assert!(table.len() >= 6, "{table:?}");
    assert_eq!(table, of("--format markdown"));
    assert_eq!(table, of("--format json"));
    assert_eq!(table, of("--format html"));
}

/// The schedule's own lines: a node whose plan proposes a night layout
/// (`fixtures/scenarios/mig-plan.toml`; the demo's day layouts are whole GPUs already, so it
/// proposes none) prints the cron lines and the service that apply it, and every command it
/// prints runs as printed.
#[test]
fn every_command_printed_for_a_scheduled_mig_node_runs_as_printed() {
    let dir = tempfile::tempdir().unwrap();
    let h = crate::mig_plan_cli::simulate(dir.path());
    let source = format!("history:{}", h.display());
    let env = Env::new(&crate::mig_plan_cli::scenario(), "mig-1", &[("mig-1", 2)]);
    let found = run_printed_commands(&env, &source, None, true);
    // The schedule: the cron lines and the service apply it, written to files or printed.
    let printed = found
        .iter()
        .filter(|f| f.scheduled && f.output.starts_with("tessera mig plan"))
        .count();
    assert!(
        printed >= 3,
        "mig plan prints 2 cron lines and a service: {found:?}"
    );
    for file in ["tessera-mig-schedule.cron", "tessera-mig-schedule.service"] {
        assert!(
            found
                .iter()
                .any(|f| f.output == file && f.line.contains(" mig apply --schedule ")),
            "{file}: {found:?}"
        );
    }
}

#[test]
fn every_command_printed_on_a_simulated_fleet_runs_as_printed() {
    let root = root();
    let scenario = root.join("fixtures/scenarios/fleet-64.toml");
    let names: Vec<String> = (0..8).map(|i| format!("node-{i:04}")).collect();
    let nodes: Vec<(&str, u32)> = names.iter().map(|n| (n.as_str(), 8)).collect();
    let env = Env::new(&scenario, "node-0001", &nodes);
    let history = env.path("fleet");
    env.tessera(&[
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
    let source = format!("history:{}", history.display());
    let found = run_every_printed_command(&env, &source, None);
    let kinds: BTreeSet<String> = found.iter().map(|f| kind(&f.line)).collect();
    for k in ["mig plan", "mig apply", "replay"] {
        assert!(kinds.contains(k), "no `tessera {k}` printed: {kinds:?}");
    }
}

#[test]
fn the_collectors_find_what_is_printed() {
    assert_eq!(
        backticked("run `tessera mig plan --source x -o p.yaml`, then `ls` and `tessera replay"),
        ["tessera mig plan --source x -o p.yaml"]
    );
    assert_eq!(
        html_code("<p><code>tessera a &#39;b c&#39;</code> <code>kubectl x</code></p>"),
        ["tessera a 'b c'"]
    );
    let mut v = Vec::new();
    json_commands(
        &serde_json::json!({"next_steps": [{"what": "x", "command": "tessera notify --dry-run"}],
            "mig": {"summary": "with `tessera mig apply p.yaml --config day`."}}),
        &mut v,
    );
    v.sort();
    assert_eq!(
        v,
        [
            "tessera mig apply p.yaml --config day",
            "tessera notify --dry-run"
        ]
    );
    assert_eq!(
        cron_commands(
            "CRON_TZ=UTC\n0 17 * * * root /usr/bin/tessera mig apply --schedule /s.yaml   # -> night\n"
        ),
        ["/usr/bin/tessera mig apply --schedule /s.yaml"]
    );
    assert_eq!(kind("tessera mig apply x"), "mig apply");
    assert_eq!(kind("tessera replay --plan p"), "replay");
}

#[test]
fn notify_needs_a_url_only_to_send() {
    let demo = format!("history:{}", root().join("fixtures/demo-history").display());
    // A dry run contacts nothing and needs no URL: the alerts as the POST's body.
    let out = tessera_with(&["notify", "--source", &demo, "--dry-run"], |_| {});
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let alerts: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(!alerts.as_array().unwrap().is_empty(), "{alerts}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("alert(s) would be sent; nothing was sent"),
        "{stderr}"
    );
    // Sending does.
    let out = tessera_with(&["notify", "--source", &demo], |_| {});
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--alertmanager.url"));
}

#[test]
fn the_runner_fails_what_fails_as_printed() {
    let root = root();
    let env = Env::new(
        &root.join("fixtures/scenarios/report-demo.toml"),
        "lab-a",
        &[("lab-a", 4)],
    );
    let found = |line: &str, scheduled: bool| Found {
        output: "test".into(),
        line: line.into(),
        scheduled,
    };
    const END: &str = "2026-11-06T00:00:00Z";
    // A scale-down on evidence older than 15 minutes is refused; a minute after the data's end
    // it runs (the fake cluster has no such workload: nothing to do).
    let demo_src = format!("history:{}", root.join("fixtures/demo-history").display());
    let scale = format!("tessera scale-down --source {demo_src} --namespace research");
    assert_eq!(env.run(&found(&scale, false), 0, END), None);
    assert!(
        env.run(&found(&scale, false), 0, "2026-11-07T00:00:00Z")
            .is_some(),
        "a day after the data's end, the evidence is stale"
    );
    // What the report printed before issue 48: no --source, no plan file.
    for line in [
        "tessera mig plan -o plan.yaml",
        "tessera mig apply",
        "tessera notify --source history:/nowhere --dry-run",
    ] {
        let failure = env.run(&found(line, false), 0, END);
        assert!(failure.is_some(), "{line} passed");
    }
    // A runnable one passes, and a scheduled one runs the binary under test.
    let demo = format!("history:{}", root.join("fixtures/demo-history").display());
    assert_eq!(
        env.run(
            &found(&format!("tessera ingest --source {demo}"), false),
            0,
            END
        ),
        None
    );
    assert_eq!(
        env.run(
            &found(&format!("/usr/bin/tessera ingest --source {demo}"), true),
            0,
            END
        ),
        None
    );
}
