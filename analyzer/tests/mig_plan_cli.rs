//! End to end: `tessera simulate` a small MIG scenario, run `tessera mig plan` on its history, and
//! read every file it writes with the strict parsers (tessera plan, mig-parted config, schedule);
//! a workload that needs a whole GPU left out of MIG mode from the plan through the mig-parted
//! export to `tessera mig apply` on the simulated node; plus the busy-ratio fallback from a CSV
//! source and the error exits.

use crate::support::cli;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use tessera_core::mig::parted::{Devices, PartedFile};
use tessera_core::mig::plan::{MigSchedule, TesseraPlan};
use tessera_core::mig::{self, validate_layout};

fn tessera(args: &[&str]) -> Output {
    cli::tessera_with(args, |c| {
        c.env("NO_COLOR", "1");
    })
}

pub(crate) fn scenario() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/scenarios/mig-plan.toml")
}

pub(crate) fn simulate(dir: &Path) -> PathBuf {
    simulate_scenario(dir, &scenario(), 2)
}

fn simulate_scenario(dir: &Path, scenario: &Path, days: u32) -> PathBuf {
    let h = dir.join("h");
    let out = tessera(&[
        "simulate",
        "--scenario",
        scenario.to_str().unwrap(),
        "--days",
        &days.to_string(),
        "--sample-interval",
        "30s",
        "--history.interval",
        "1m",
        "--out",
        h.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    h
}

/// Per (mig-parted label, GPU index): MIG on and profile counts.
type Layouts = BTreeMap<(String, u32), (bool, BTreeMap<String, u32>)>;

fn parted_layouts(cfg: &PartedFile) -> Layouts {
    let mut out = Layouts::new();
    for (label, entries) in &cfg.configs {
        for e in entries {
            let Devices::Indices(idx) = &e.devices else {
                panic!("explicit devices expected")
            };
            for &i in idx {
                assert!(
                    out.insert((label.clone(), i), (e.mig_enabled, e.mig_devices.clone()))
                        .is_none()
                );
            }
        }
    }
    out
}

fn plan_layouts(plan: &TesseraPlan) -> Layouts {
    let mut out = Layouts::new();
    for (label, gpus) in &plan.configs {
        for g in gpus {
            let mut counts = BTreeMap::new();
            for i in &g.instances {
                *counts.entry(i.profile.clone()).or_insert(0) += 1;
            }
            out.insert((label.clone(), g.gpu), (g.mig_enabled, counts));
        }
    }
    out
}

#[test]
fn plans_a_simulated_mig_node_with_a_night_switch() {
    let dir = tempfile::tempdir().unwrap();
    let h = simulate(dir.path());
    let plan_path = dir.path().join("plan.yaml");
    let parted_path = dir.path().join("parted.yaml");
    let sched_path = dir.path().join("schedule.yaml");
    let units = dir.path().join("units");
    let out = tessera(&[
        "mig",
        "plan",
        "--source",
        &format!("history:{}", h.display()),
        "-o",
        plan_path.to_str().unwrap(),
        "--mig-parted-config",
        parted_path.to_str().unwrap(),
        "--schedule",
        sched_path.to_str().unwrap(),
        "--schedule-units",
        units.to_str().unwrap(),
        "--format",
        "json",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let summary: Value = serde_json::from_slice(&out.stdout).expect("JSON summary on stdout");
    assert_eq!(summary["gpus_before"], 2);
    assert_eq!(summary["gpus_after"], 2);
    assert_eq!(summary["lower_bound"], 2);
    assert_eq!(summary["unplaceable"].as_array().unwrap().len(), 0);
    let ws = summary["workloads"].as_array().unwrap();
    assert_eq!(ws.len(), 8, "seven notebooks and the API: {ws:?}");
    for w in ws {
        // MIG instances on an H100: SM activity from GPM.
        assert_eq!(w["measured"]["kind"], "mig");
        assert_eq!(w["measured"]["activity_source"], "sm_active");
        let peak = w["measured"]["peak_memory_bytes"].as_f64().unwrap();
        let need = w["memory_need_bytes"].as_f64().unwrap();
        assert!(
            (need - peak * 1.2).abs() <= 1.0 + peak * 1e-9,
            "{need} vs {peak}"
        );
    }
    let api = ws.iter().find(|w| w["id"] == "serving/api-0").unwrap();
    // 12 GiB + 20% does not fit a 1g.10gb; a light load needs 1 slice of 3.
    assert!(api["memory_need_bytes"].as_f64().unwrap() > 14.0 * (1u64 << 30) as f64);
    assert_eq!(api["compute_need_slices"], 1);

    let plan = TesseraPlan::from_file(&plan_path).expect("plan parses");
    let day = &plan.configs["day"];
    let placed: Vec<&String> = day
        .iter()
        .flat_map(|g| g.instances.iter().flat_map(|i| &i.workloads))
        .collect();
    assert_eq!(placed.len(), 8);
    for g in day {
        validate_layout(mig::model(&g.model).unwrap(), &g.layout()).unwrap();
    }
    // The API gets a 1g with two memory slices.
    assert!(day.iter().any(|g| {
        g.instances
            .iter()
            .any(|i| i.profile_id == 15 && i.workloads == vec!["serving/api-0".to_string()])
    }));
    // Night: the API keeps its instance, the other GPU becomes one 7g.
    let night = &plan.configs["night"];
    assert!(
        night
            .iter()
            .any(|g| g.instances.len() == 1 && g.instances[0].profile_id == 0)
    );
    let api_day = day
        .iter()
        .find_map(|g| {
            g.instances
                .iter()
                .find(|i| i.workloads.contains(&"serving/api-0".to_string()))
                .map(|i| (g.gpu, i.placement))
        })
        .unwrap();
    let api_night = night
        .iter()
        .find_map(|g| {
            g.instances
                .iter()
                .find(|i| i.workloads.contains(&"serving/api-0".to_string()))
                .map(|i| (g.gpu, i.placement))
        })
        .unwrap();
    assert_eq!(api_day, api_night);

    // The plan says where each workload's rows are (what `tessera replay` moves), from the
    // summary's measurements, and the window it was planned from.
    assert_eq!(plan.kind, "tessera-plan");
    assert_eq!(plan.workloads.len(), 8, "{:?}", plan.workloads.keys());
    for w in ws {
        let src = &plan.workloads[w["id"].as_str().unwrap()];
        assert_eq!(src.kind.as_str(), w["measured"]["kind"]);
        assert_eq!(src.node, "mig-1");
        assert!(src.gpu_instance.is_some(), "{src:?}");
        assert_eq!(
            src.memory_peak_bytes,
            w["measured"]["peak_memory_bytes"].as_u64()
        );
    }
    // Every placed workload is described; the GPU instances are distinct.
    let gis: std::collections::BTreeSet<_> = plan
        .workloads
        .values()
        .map(|w| (w.uuid.clone(), w.gpu_instance))
        .collect();
    assert_eq!(gis.len(), 8);
    assert!(placed.iter().all(|id| plan.workloads.contains_key(*id)));
    let window = plan.window.as_ref().expect("window");
    assert!(window.from < window.until, "{window:?}");
    assert_eq!(window.sources, vec![format!("history:{}", h.display())]);
    // The schedule is in the plan too, equal to the schedule file's switches.
    let inline = plan.schedule.as_ref().expect("inline schedule");
    let sched_file = MigSchedule::from_file(&sched_path).unwrap();
    assert_eq!(inline.switches, sched_file.switches);
    assert_eq!(inline.timezone, sched_file.timezone);

    let parted = PartedFile::from_file(&parted_path).expect("mig-parted config parses");
    assert_eq!(parted_layouts(&parted), plan_layouts(&plan));

    let sched = MigSchedule::from_file(&sched_path).expect("schedule parses");
    assert_eq!(sched.plan, "plan.yaml");
    let configs: Vec<&str> = sched.switches.iter().map(|s| s.config.as_str()).collect();
    assert!(configs.contains(&"night") && configs.contains(&"day"));
    // Notebooks run 09:00–18:00 on weekdays: the night starts at 18:00.
    assert!(
        sched
            .switches
            .iter()
            .any(|s| s.config == "night" && s.at == "18:00"),
        "{sched:?}"
    );
    let timer = std::fs::read_to_string(units.join("tessera-mig-schedule.timer")).unwrap();
    assert!(timer.contains("OnCalendar=*-*-* 18:00:00 UTC"), "{timer}");
    let service = std::fs::read_to_string(units.join("tessera-mig-schedule.service")).unwrap();
    assert!(service.contains("mig apply --schedule "), "{service}");
    let cron = std::fs::read_to_string(units.join("tessera-mig-schedule.cron")).unwrap();
    assert!(cron.starts_with("CRON_TZ=UTC\n0 18 * * * "), "{cron}");
}

/// `fixtures/scenarios/mig-node.toml`: GPU 0 an H100 with MIG off running a 70 GiB training job,
/// GPU 2 an H100 in MIG mode serving from a 3g.40gb (plus two idle instances). With 5% headroom
/// the training job needs the whole GPU (a 7g.80gb): the plan leaves GPU 0 out of MIG mode, says
/// why, the mig-parted export agrees, and applying either file never enables MIG mode on GPU 0
/// (which the running job would refuse anyway).
#[test]
fn a_workload_that_needs_the_whole_gpu_is_left_out_of_mig_mode_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let node = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/scenarios/mig-node.toml");
    let h = simulate_scenario(dir.path(), &node, 1);
    let src = format!("history:{}", h.display());
    let plan_path = dir.path().join("plan.yaml");
    let parted_path = dir.path().join("parted.yaml");
    let plan_args = [
        "mig",
        "plan",
        "--source",
        &src,
        "--headroom",
        "0.05",
        "-o",
        plan_path.to_str().unwrap(),
        "--mig-parted-config",
        parted_path.to_str().unwrap(),
    ];
    let out = tessera(&plan_args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("mig-node-1/GPU0 H100-80GB: whole GPU, MIG off [slurm-81234]"),
        "{stdout}"
    );
    assert!(
        stdout.contains("mig-node-1/GPU0 runs one workload that needs the whole GPU: left out of MIG mode (MIG would only cost peer-to-peer and profiling)."),
        "{stdout}"
    );
    assert!(!stdout.contains("7g.80gb"), "{stdout}");
    let out = tessera(&[&plan_args[..], &["--format", "json"]].concat());
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["gpus_after"], 2, "the whole GPU still counts as used");
    assert_eq!(
        v["mig_off_gpus"],
        serde_json::json!([{"node": "mig-node-1", "index": 0, "model": "H100-80GB", "workloads": ["slurm-81234"]}])
    );
    assert!(
        v["mig_off_reason"]
            .as_str()
            .unwrap()
            .starts_with("mig-node-1/GPU0 runs one workload")
    );

    let plan = TesseraPlan::from_file(&plan_path).expect("plan parses");
    let day = &plan.configs["day"];
    let gpu0 = day.iter().find(|g| g.gpu == 0).unwrap();
    assert!(!gpu0.mig_enabled && gpu0.instances.is_empty());
    assert_eq!(gpu0.workloads, vec!["slurm-81234"]);
    let gpu2 = day.iter().find(|g| g.gpu == 2).unwrap();
    assert!(gpu2.mig_enabled);
    assert_eq!(gpu2.instances.len(), 1);
    assert_eq!(gpu2.instances[0].profile, "3g.40gb");
    let parted = PartedFile::from_file(&parted_path).expect("mig-parted config parses");
    let layouts = parted_layouts(&parted);
    assert_eq!(layouts, plan_layouts(&plan));
    assert_eq!(layouts[&("day".to_string(), 0)], (false, BTreeMap::new()));

    // Apply both files on the simulated node: MIG mode stays off on GPU 0.
    let mig = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
            .current_dir(dir.path())
            .arg("mig")
            .args(args)
            .args([
                "--backend",
                "sim",
                "--sim.scenario",
                node.to_str().unwrap(),
                "--sim.state",
                "state.json",
            ])
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.code(), text)
    };
    let (code, text) = mig(&["apply", "plan.yaml"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        !text.contains("MIG mode") && !text.contains("GPU 0 ("),
        "{text}"
    );
    assert!(
        text.contains("GPU 2 ("),
        "GPU 2's idle instances go: {text}"
    );
    // The plan's data (the scenario, November 2026) is older than --evidence.max-age 7d by
    // the clock: --yes refuses, and changes nothing; at a time within a week of it, it applies.
    let (code, text) = mig(&["apply", "plan.yaml", "--yes"]);
    assert_eq!(code, Some(2), "{text}");
    assert!(
        text.contains("old: the data ends 2026-11-03T00:00:00Z")
            && text.contains("--evidence.max-age 7d")
            && text.contains("nothing was changed"),
        "{text}"
    );
    let (code, text) = mig(&["assert", "plan.yaml"]);
    assert_ne!(
        code,
        Some(0),
        "refused, so the node is not at the plan: {text}"
    );
    let (code, text) = mig(&[
        "apply",
        "plan.yaml",
        "--yes",
        "--now",
        "2026-11-04T00:00:00Z",
    ]);
    assert_eq!(code, Some(0), "{text}");
    let (code, text) = mig(&["assert", "plan.yaml"]);
    assert_eq!(code, Some(0), "{text}");
    let (code, text) = mig(&["apply", "parted.yaml", "--config", "day"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("nothing to do"), "{text}");
    let (code, text) = mig(&["export", "-o", "now.yaml"]);
    assert_eq!(code, Some(0), "{text}");
    let now = TesseraPlan::from_file(&dir.path().join("now.yaml")).unwrap();
    let now0 = now.configs["current"].iter().find(|g| g.gpu == 0).unwrap();
    assert!(!now0.mig_enabled && now0.instances.is_empty(), "{now0:?}");
}

#[test]
fn busy_ratio_stands_in_when_sm_activity_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("gpus.csv");
    let mut text = String::from("timestamp,entity,metric,value,node,gpu,model\n");
    for t in 0..60 {
        let ts = 1_793_000_000 + t * 60;
        for (g, busy, mem_gib) in [(0, 0.10, 9.0), (1, 0.30, 30.0), (2, 0.0, 0.2)] {
            let u = format!("GPU-{g}");
            text.push_str(&format!(
                "{ts},{u},gpu_busy_ratio,{busy},n1,{g},NVIDIA A100-SXM4-80GB\n"
            ));
            text.push_str(&format!(
                "{ts},{u},memory_used_bytes,{},n1,{g},NVIDIA A100-SXM4-80GB\n",
                (mem_gib * (1u64 << 30) as f64) as u64
            ));
            text.push_str(&format!(
                "{ts},{u},memory_total_bytes,{},n1,{g},NVIDIA A100-SXM4-80GB\n",
                80u64 << 30
            ));
        }
    }
    std::fs::write(&csv, text).unwrap();
    let plan_path = dir.path().join("plan.yaml");
    let out = tessera(&[
        "mig",
        "plan",
        "--source",
        &format!("csv:{}", csv.display()),
        "--since",
        "2026-10-01T00:00:00Z",
        "-o",
        plan_path.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let ws = v["workloads"].as_array().unwrap();
    assert_eq!(ws.len(), 2, "the empty GPU is not a workload: {ws:?}");
    for w in ws {
        assert_eq!(w["measured"]["kind"], "gpu");
        assert_eq!(w["measured"]["activity_source"], "busy");
    }
    // 0.30 busy × 7 slices = 2.1 → 3 slices; 30 GiB × 1.2 = 36 GiB → 3g.40gb. 0.10 → 1 slice,
    // 10.8 GiB → 1g.20gb (a 1g.10gb holds 9.6 GiB). Both fit one A100-80GB.
    let big = ws.iter().find(|w| w["id"] == "n1/GPU1").unwrap();
    assert_eq!(big["compute_need_slices"], 3);
    assert_eq!(v["gpus_before"], 2);
    assert_eq!(v["gpus_after"], 1);
    let plan = TesseraPlan::from_file(&plan_path).unwrap();
    let used: Vec<_> = plan.configs["day"]
        .iter()
        .filter(|g| g.mig_enabled)
        .collect();
    assert_eq!(used.len(), 1);
    let mut ids: Vec<u32> = used[0].instances.iter().map(|i| i.profile_id).collect();
    ids.sort_unstable();
    assert_eq!(ids, vec![9, 15]);
}

fn assert_fails(args: &[&str], needle: &str) {
    let out = tessera(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    assert!(
        stderr.contains(needle),
        "{args:?}: expected {needle:?} in {stderr}"
    );
}

#[test]
fn bad_input_exits_2_with_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let o = dir.path().join("plan.yaml");
    let o = o.to_str().unwrap();
    let missing = format!("history:{}", dir.path().join("nope").display());
    assert_fails(&["mig", "plan", "--source", &missing, "-o", o], "nope");
    let h = simulate(dir.path());
    let src = format!("history:{}", h.display());
    assert_fails(
        &["mig", "plan", "--source", &src, "-o", o, "--headroom=-1"],
        "--headroom",
    );
    assert_fails(
        &[
            "mig",
            "plan",
            "--source",
            &src,
            "-o",
            o,
            "--quantile",
            "1.5",
        ],
        "--quantile",
    );
    assert_fails(
        &[
            "mig",
            "plan",
            "--source",
            &src,
            "-o",
            o,
            "--tz",
            "Mars/Olympus",
        ],
        "--tz",
    );
    let bad_out = dir.path().join("no-such-dir").join("plan.yaml");
    assert_fails(
        &[
            "mig",
            "plan",
            "--source",
            &src,
            "-o",
            bad_out.to_str().unwrap(),
        ],
        "writing",
    );
    assert!(!bad_out.exists());
    // Only a GPU model without a MIG table: nothing to plan.
    let csv = dir.path().join("l4.csv");
    std::fs::write(
        &csv,
        "timestamp,entity,metric,value,node,gpu,model\n1793000000,GPU-a,memory_used_bytes,5000000000,n1,0,NVIDIA L4\n1793000060,GPU-a,memory_used_bytes,5000000000,n1,0,NVIDIA L4\n",
    )
    .unwrap();
    assert_fails(
        &[
            "mig",
            "plan",
            "--source",
            &format!("csv:{}", csv.display()),
            "--since",
            "2026-10-01T00:00:00Z",
            "-o",
            o,
        ],
        "no GPU of a MIG-capable model",
    );
}
