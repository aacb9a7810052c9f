//! Issue 48 item 4, end to end: the day/night schedule `tessera mig plan` writes is run by its
//! own cron line and its own systemd `ExecStart=` (parsed out of the files it wrote, never
//! re-typed) against the simulated node of `fixtures/scenarios/mig-plan.toml`, through the real
//! `tessera` binary, the way cron (`/bin/sh -c`, in `/`, with cron's `PATH`) and systemd (the
//! words, no shell) run them.
//!
//! Covered: the generated command carries `--yes` and the device flags given to `mig plan`; it
//! switches the node to the config the schedule says is active (read back through `tessera mig
//! export`) and journals the run; run again it does nothing. A scheduled apply refused because
//! processes are in the way, because another apply holds the lock, or because the plan no longer
//! reads exits 2, changes nothing and is journaled as `refused`. `mig plan` refuses device flags
//! it could not write into a working apply.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use chrono::Utc;
use tessera_core::mig::apply::{Journal, Record};
use tessera_core::mig::plan::{MigSchedule, TesseraPlan};
use tessera_core::sim::SimNode;
use tessera_core::sim::control::SimMigControl;

use crate::mig_plan_cli::{scenario, simulate};
use crate::support::cli;

/// A planned node: the history's plan, schedule and units, and the simulated node's state file.
struct Planned {
    dir: tempfile::TempDir,
}

/// One GPU's layout: index, MIG on, and (profile id, start, size) of each instance, sorted.
type Layout = Vec<(u32, bool, Vec<(u32, u32, u32)>)>;

impl Planned {
    /// Simulates two days of the scenario and plans them with a schedule whose apply runs
    /// against the simulated node (`--backend sim`, its state in `state.json`).
    fn new() -> Planned {
        Planned::with_plan_at("plan.yaml")
    }

    /// As [`Planned::new`], the plan written to `plan` (relative to the folder of the schedule).
    fn with_plan_at(plan: &str) -> Planned {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(plan).parent().unwrap()).unwrap();
        let h = simulate(dir.path());
        let p = |n: &str| dir.path().join(n).to_str().unwrap().to_string();
        let (code, out, err) = cli::run(&[
            "mig",
            "plan",
            "--source",
            &format!("history:{}", h.display()),
            "-o",
            &p(plan),
            "--schedule",
            &p("schedule.yaml"),
            "--schedule-units",
            &p("units"),
            "--backend",
            "sim",
            "--sim.scenario",
            scenario().to_str().unwrap(),
            "--sim.state",
            &p("state.json"),
            // The scenario's data is from early November 2026: older than the scheduled
            // apply's default --evidence.max-age, so its lines carry this.
            "--allow-stale-evidence",
        ]);
        assert_eq!(code, 0, "{out}\n{err}");
        assert!(out.contains("night layout: 1 GPU(s)"), "{out}");
        Planned { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn schedule(&self) -> MigSchedule {
        MigSchedule::from_file(&self.path("schedule.yaml")).unwrap()
    }

    /// The command of every line of the generated cron file, as cron hands it to `/bin/sh`
    /// (six fields — minute, hour, day, month, weekday, user — then the command, cut at the first
    /// bare `%`, `\%` turned into `%`), with the config its comment names.
    fn cron_commands(&self) -> Vec<(String, String)> {
        let text = std::fs::read_to_string(self.path("units/tessera-mig-schedule.cron")).unwrap();
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some("CRON_TZ=UTC"), "{text}");
        lines
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                let mut rest = l;
                for _ in 0..6 {
                    let field_end = rest.find(' ').unwrap_or_else(|| panic!("short line {l}"));
                    rest = rest[field_end..].trim_start();
                }
                let mut command = String::new();
                let mut chars = rest.chars().peekable();
                while let Some(c) = chars.next() {
                    match c {
                        '\\' if chars.peek() == Some(&'%') => {}
                        '%' if !command.ends_with('\\') => break,
                        _ => command.push(c),
                    }
                }
                let config = l.rsplit("# -> ").next().unwrap().to_string();
                (config, command)
            })
            .collect()
    }

    /// The words of the generated service's `ExecStart=`, as systemd splits them (the paths here
    /// need no quotes: checked), `%%` and `$$` undoubled.
    fn exec_start(&self) -> Vec<String> {
        let text =
            std::fs::read_to_string(self.path("units/tessera-mig-schedule.service")).unwrap();
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix("ExecStart="))
            .unwrap_or_else(|| panic!("no ExecStart= in {text}"));
        assert!(!line.contains(['"', '\'', '\\']), "{line}");
        line.split_whitespace()
            .map(|w| w.replace("%%", "%").replace("$$", "$"))
            .collect()
    }

    /// Removes every process from the simulated node (as if its workloads had stopped), so
    /// that instances may be destroyed.
    fn stop_processes(&self) {
        let scenario = tessera_core::sim::load_scenario(Some(&scenario())).unwrap();
        let node = SimNode::new(&scenario, "mig-1").unwrap();
        let mut ctrl = SimMigControl::open(&node, Some(&self.path("state.json"))).unwrap();
        let mut state = ctrl.state().clone();
        for g in &mut state.gpus {
            g.processes.clear();
            for i in &mut g.instances {
                i.processes.clear();
            }
        }
        ctrl.set_state(state).unwrap();
    }

    /// `tessera mig VERB ARGS` with the device flags of the generated apply (its words after
    /// `--yes`, but `--allow-plan-outside`, which only `--schedule` takes, and the evidence flag
    /// for other verbs than `apply`).
    fn mig_with_apply_flags(&self, verb_and_args: &[&str]) -> (i32, String, String) {
        let words = self.exec_start();
        let yes = words.iter().position(|w| w == "--yes").unwrap();
        let mut args: Vec<&str> = vec!["mig"];
        args.extend_from_slice(verb_and_args);
        // The evidence flag is apply's only.
        let apply = verb_and_args.first() == Some(&"apply");
        args.extend(
            words[yes + 1..]
                .iter()
                .map(String::as_str)
                .filter(|w| *w != "--allow-plan-outside")
                .filter(|w| apply || *w != "--allow-stale-evidence"),
        );
        cli::run(&args)
    }

    /// The node's layout, read back through `tessera mig export`.
    fn exported(&self) -> Layout {
        let (code, out, err) = self.mig_with_apply_flags(&["export"]);
        assert_eq!(code, 0, "{err}");
        let plan = TesseraPlan::parse(&out, "export").unwrap();
        layout(&plan, "current")
    }

    fn planned(&self, config: &str) -> Layout {
        let plan = TesseraPlan::from_file(&self.path("plan.yaml")).unwrap();
        layout(&plan, config)
    }

    fn journal(&self) -> Vec<Record> {
        Journal::new(&self.path("state.json.journal"))
            .records()
            .unwrap()
    }
}

fn layout(plan: &TesseraPlan, config: &str) -> Layout {
    let mut out: Layout = plan.configs[config]
        .iter()
        .map(|g| {
            let mut inst: Vec<(u32, u32, u32)> = g
                .instances
                .iter()
                .map(|i| (i.profile_id, i.placement.start, i.placement.size))
                .collect();
            inst.sort();
            (g.gpu, g.mig_enabled, inst)
        })
        .collect();
    out.sort();
    out
}

fn result(out: Output) -> (i32, String, String) {
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A way to run the scheduled apply: exit code, stdout, stderr.
type Run<'a> = dyn Fn() -> (i32, String, String) + 'a;

/// A cron command as cron runs it: `/bin/sh -c`, from `/`, with cron's environment.
fn run_as_cron(command: &str) -> (i32, String, String) {
    result(
        Command::new("/bin/sh")
            .arg("-c")
            .arg(command)
            .current_dir("/")
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("SHELL", "/bin/sh")
            .output()
            .unwrap(),
    )
}

/// An `ExecStart=` as systemd runs it: the words, no shell, from `/`, an empty environment.
fn run_as_systemd(words: &[String]) -> (i32, String, String) {
    result(
        Command::new(&words[0])
            .args(&words[1..])
            .current_dir("/")
            .env_clear()
            .output()
            .unwrap(),
    )
}

/// The config the apply said it applied (`config X is active since …` on stderr).
fn applied_config(stderr: &str) -> String {
    stderr
        .split("config ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .unwrap_or_else(|| panic!("no active config in {stderr}"))
        .to_string()
}

#[test]
fn the_generated_cron_line_and_unit_carry_yes_and_the_device_flags() {
    let node = Planned::new();
    let sched = node.schedule();
    let crons = node.cron_commands();
    assert_eq!(crons.len(), sched.switches.len(), "{crons:?}");
    let words = node.exec_start();
    for (config, command) in &crons {
        assert!(sched.switches.iter().any(|s| &s.config == config));
        // The same command as the unit's (before the shell comment naming the config): one
        // apply, whichever switch runs it.
        let (apply, comment) = command.split_once(" # ").unwrap();
        assert_eq!(comment, format!("-> {config}"));
        assert_eq!(apply.split_whitespace().collect::<Vec<_>>(), words);
    }
    assert_eq!(words[0], env!("CARGO_BIN_EXE_tessera"), "this binary");
    assert_eq!(words[1..4], ["mig", "apply", "--schedule"]);
    assert_eq!(Path::new(&words[4]), node.path("schedule.yaml"));
    assert_eq!(words[5], "--yes");
    let state = node.path("state.json");
    let scenario = scenario();
    assert_eq!(
        words[6..],
        [
            "--backend",
            "sim",
            "--sim.scenario",
            scenario.to_str().unwrap(),
            "--sim.state",
            state.to_str().unwrap(),
            "--allow-stale-evidence",
        ]
    );
}

/// Issue 49: a scheduled apply acts only on fresh evidence. Without an evidence flag given to
/// `mig plan`, the lines carry none, and the scheduled apply of a plan whose data is older than
/// `--evidence.max-age` (7d) refuses: exit 2, journaled as refused, the node unchanged.
#[test]
fn a_scheduled_apply_of_a_plan_from_old_data_refuses_and_is_journaled() {
    let node = Planned::new();
    node.stop_processes();
    let units = node.path("units");
    let (code, out, err) = cli::run(&[
        "mig",
        "plan",
        "--source",
        &format!("history:{}", node.path("h").display()),
        "-o",
        node.path("plan.yaml").to_str().unwrap(),
        "--schedule",
        node.path("schedule.yaml").to_str().unwrap(),
        "--schedule-units",
        units.to_str().unwrap(),
        "--backend",
        "sim",
        "--sim.scenario",
        scenario().to_str().unwrap(),
        "--sim.state",
        node.path("state.json").to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    let unit = node.exec_start();
    assert!(!unit.iter().any(|w| w.contains("evidence")), "{unit:?}");
    let before = node.exported();
    let (code, _, err) = run_as_systemd(&unit);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("more than --evidence.max-age 7d") && err.contains("nothing was changed"),
        "{err}"
    );
    let j = node.journal();
    assert_eq!(j.last().map(|r| r.event.as_str()), Some("refused"), "{j:?}");
    assert_eq!(node.exported(), before);
}

#[test]
fn the_generated_schedule_switches_the_simulated_node_by_its_own_lines() {
    let node = Planned::new();
    node.stop_processes();
    let sched = node.schedule();
    let (_, cron) = node.cron_commands().into_iter().next().unwrap();
    let unit = node.exec_start();
    let runners: [(&str, &Run<'_>); 2] = [
        ("cron", &|| run_as_cron(&cron)),
        ("systemd", &|| run_as_systemd(&unit)),
    ];
    for (name, run) in runners {
        let mut switched = false;
        // A switch time may pass between reading the schedule and the run: then once more.
        for _ in 0..2 {
            let active = sched.active_at(Utc::now()).unwrap().config;
            let other = if active == "day" { "night" } else { "day" };
            assert_ne!(node.planned(&active), node.planned(other));
            // Put the node on the other config first (the plan's own apply, not the schedule).
            let plan = node.path("plan.yaml");
            let plan = plan.to_str().unwrap();
            let (code, _, err) =
                node.mig_with_apply_flags(&["apply", plan, "--config", other, "--yes"]);
            assert_eq!(code, 0, "{err}");
            assert_eq!(node.exported(), node.planned(other));
            let before = node.journal().len();

            let (code, out, err) = run();
            assert_eq!(code, 0, "{name}: {out}\n{err}");
            let ran = applied_config(&err);
            if ran != active {
                continue;
            }
            assert!(out.contains("applied"), "{name}: {out}");
            assert_eq!(node.exported(), node.planned(&active), "{name}");
            let new = &node.journal()[before..];
            assert_eq!(new.first().map(|r| r.event.as_str()), Some("begin"));
            assert!(
                new.first()
                    .and_then(|r| r.plan.as_deref())
                    .is_some_and(|p| p.ends_with(&format!("plan.yaml config {active}"))),
                "{new:?}"
            );
            let end = new.last().unwrap();
            assert_eq!(
                (end.event.as_str(), end.result.as_deref()),
                ("end", Some("applied"))
            );
            switched = true;
            break;
        }
        assert!(switched, "{name}: the schedule's config never ran");
    }
    // Run again at once: the node matches, nothing is done or journaled.
    let journal = node.journal();
    let layout = node.exported();
    let (code, out, err) = run_as_cron(&cron);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("nothing to do"), "{out}");
    assert_eq!(node.journal(), journal);
    assert_eq!(node.exported(), layout);
}

#[test]
fn a_refused_scheduled_apply_exits_non_zero_and_is_journaled() {
    let node = Planned::new();
    let (_, cron) = node.cron_commands().into_iter().next().unwrap();
    let unit = node.exec_start();
    let before = node.exported();
    let last_refusal = |node: &Planned| {
        let j = node.journal();
        let r = j.last().cloned().expect("a journal record");
        assert_eq!(r.event, "refused", "{j:?}");
        assert!(
            r.plan
                .as_deref()
                .is_some_and(|p| p.contains("schedule.yaml")),
            "{r:?}"
        );
        (j.len(), r.result.unwrap_or_default())
    };

    // The scenario's workloads run on every instance: the switch would destroy busy ones.
    assert!(before != node.planned("day") && before != node.planned("night"));
    let (code, _, err) = run_as_cron(&cron);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("refusing to apply"), "{err}");
    let (n, why) = last_refusal(&node);
    assert_eq!(n, 1);
    assert!(
        why.contains("processes run where the plan changes the layout"),
        "{why}"
    );
    assert!(why.contains("pod lab/nb-"), "{why}");
    assert_eq!(node.exported(), before);

    // Another apply holds the lock.
    node.stop_processes();
    let lock = File::create(node.path("state.json.lock")).unwrap();
    lock.lock().unwrap();
    let (code, _, err) = run_as_systemd(&unit);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("holds the lock"), "{err}");
    let (n, why) = last_refusal(&node);
    assert_eq!(n, 2);
    assert!(why.contains("holds the lock"), "{why}");
    lock.unlock().unwrap();
    assert_eq!(node.exported(), before);

    // The plan the schedule names no longer reads.
    let plan = std::fs::read_to_string(node.path("plan.yaml")).unwrap();
    std::fs::write(node.path("plan.yaml"), "version: v1\nkind: tessera-plan\n").unwrap();
    let (code, _, err) = run_as_cron(&cron);
    assert_eq!(code, 2, "{err}");
    let (n, why) = last_refusal(&node);
    assert_eq!(n, 3);
    assert!(why.contains("plan.yaml"), "{why}");
    assert_eq!(node.exported(), before);

    // With the plan back and nothing in the way, the same line applies.
    std::fs::write(node.path("plan.yaml"), plan).unwrap();
    let (code, _, err) = run_as_cron(&cron);
    assert_eq!(code, 0, "{err}");
    assert_eq!(node.exported(), node.planned(&applied_config(&err)));
    assert_eq!(node.journal().last().unwrap().event, "end");
}

/// A plan outside the schedule's folder is named by its absolute path, which the apply refuses
/// unless told: the generated command says `--allow-plan-outside`, and runs.
#[test]
fn a_plan_outside_the_schedules_folder_is_allowed_by_the_generated_command() {
    let node = Planned::with_plan_at("plans/plan.yaml");
    let plan = node.path("plans/plan.yaml");
    assert_eq!(node.schedule().plan, plan.to_str().unwrap());
    let words = node.exec_start();
    assert_eq!(
        words.last().map(String::as_str),
        Some("--allow-plan-outside")
    );
    node.stop_processes();
    let (code, out, err) = run_as_systemd(&words);
    assert_eq!(code, 0, "{out}\n{err}");
    let active = applied_config(&err);
    let plan = TesseraPlan::from_file(&plan).unwrap();
    assert_eq!(node.exported(), layout(&plan, &active));
}

#[test]
fn device_flags_that_would_make_a_broken_apply_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let h = simulate(dir.path());
    let src = format!("history:{}", h.display());
    let o = dir.path().join("plan.yaml");
    let s = dir.path().join("schedule.yaml");
    let (o, s) = (o.to_str().unwrap(), s.to_str().unwrap());
    let scenario = scenario();
    let sc = scenario.to_str().unwrap();
    let base = ["mig", "plan", "--source", &src, "-o", o];
    for (extra, needle) in [
        (vec!["--backend", "sim"], "add --schedule FILE"),
        (
            vec!["--schedule", s, "--backend", "sim", "--sim.scenario", sc],
            "--sim.state FILE",
        ),
        (
            vec!["--schedule", s, "--sim.state", "x.json"],
            "--sim.state need(s) --backend sim",
        ),
        (
            vec![
                "--schedule",
                s,
                "--backend",
                "sim",
                "--sim.scenario",
                sc,
                "--sim.state",
                "x.json",
                "--sim.node",
                "nope",
            ],
            "nope",
        ),
        (vec!["--schedule-units", "u"], "--schedule"),
    ] {
        let args: Vec<&str> = base.iter().copied().chain(extra.iter().copied()).collect();
        let (code, _, err) = cli::run(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!Path::new(o).exists(), "{args:?}: nothing written");
    }
}
