//! `tessera mig profiles` on its real NVML code path: the binary with `--nvml.lib-path` loading
//! the fake `libnvidia-ml.so` on a node with one GPU of every built-in model
//! (`fixtures/scenarios/mig-models.toml`): the tables match (exit 0); a profile altered with the
//! fake's `TESSERA_FAKE_NVML_PROFILE_PATCH` is named (exit 1); an old driver without the
//! placements call is a clear error (exit 2). And `--backend sim` prints the built-in tables.

use std::path::Path;

use tessera_e2e::{fake_nvml, fake_nvml_old, run, tessera};

const SCENARIO: &str = "fixtures/scenarios/mig-models.toml";

fn profiles(lib: &Path, args: &[&str]) -> std::process::Command {
    let mut cmd = tessera!["mig", "profiles", "--nvml.lib-path", lib];
    cmd.args(args)
        .env("TESSERA_FAKE_NVML_SCENARIO", SCENARIO)
        .env_remove("TESSERA_FAKE_NVML_PROFILE_PATCH");
    cmd
}

#[test]
fn every_model_read_through_nvml_matches_the_builtin_table() {
    let (out, stdout, err) = run(profiles(&fake_nvml(), &[]));
    assert_eq!(out.status.code(), Some(0), "{stdout}{err}");
    for key in [
        "A100-40GB",
        "A100-80GB",
        "A30-24GB",
        "H100-80GB",
        "H100-94GB-NVL",
        "GH200-96GB",
        "H200-141GB",
        "B200-180GB",
    ] {
        assert!(
            stdout.contains(&format!("matches the built-in table of {key}\n")),
            "{key}: {stdout}"
        );
    }
    assert!(!stdout.contains("difference"), "{stdout}");
    // The H100's 3g.40gb as NVML reported it.
    assert!(
        stdout.contains("    9     2  MIG 3g.40gb           3      4     39424     2  [0+4, 4+4]"),
        "{stdout}"
    );

    let (out, json, err) = run(profiles(&fake_nvml(), &["--format", "json"]));
    assert_eq!(out.status.code(), Some(0), "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["format"], "tessera-mig-profiles");
    assert_eq!(v["source"], "nvml");
    let tables = v["tables"].as_array().unwrap();
    assert_eq!(tables.len(), 8);
    assert_eq!(tables[2]["name"], "NVIDIA A30");
    assert_eq!(tables[2]["comparison"]["result"], "compared");
    assert_eq!(
        tables[2]["comparison"]["differences"],
        serde_json::json!([])
    );
    assert_eq!(tables[2]["profiles"].as_array().unwrap().len(), 5);
}

#[test]
fn a_different_driver_table_is_named() {
    // Profile 9 (3g) with placements at 0 and 2 and 30000 MiB on every GPU that has it.
    let mut cmd = profiles(&fake_nvml(), &[]);
    cmd.env(
        "TESSERA_FAKE_NVML_PROFILE_PATCH",
        "9:starts=0/2;memory_mb=30000",
    );
    let (out, stdout, err) = run(cmd);
    assert_eq!(out.status.code(), Some(1), "{stdout}{err}");
    assert!(
        stdout.contains("GPU 3: NVIDIA H100 80GB HBM3: differs from the built-in table of H100-80GB (2 differences)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("difference: profile id 9 (3g.40gb): NVML reports placements [0+4, 2+4], the built-in table has [0+4, 4+4]"),
        "{stdout}"
    );
    assert!(
        stdout.contains("difference: profile id 9 (3g.40gb): NVML reports 30000 MiB, the built-in table has 39424 MiB (approximate"),
        "{stdout}"
    );
    // The A30 has no profile 9 (its 2g+me is id 6): it still matches.
    assert!(
        stdout.contains("GPU 2: NVIDIA A30: matches the built-in table of A30-24GB"),
        "{stdout}"
    );

    // A different maximum count, in JSON.
    let mut cmd = profiles(&fake_nvml(), &["--format", "json"]);
    cmd.env("TESSERA_FAKE_NVML_PROFILE_PATCH", "19:count=6");
    let (out, json, err) = run(cmd);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let d = &v["tables"][0]["comparison"]["differences"];
    assert_eq!(d.as_array().unwrap().len(), 1, "{d}");
    assert_eq!(d[0]["kind"], "max-count");
    assert_eq!(d[0]["nvml"], 6);
    assert_eq!(d[0]["builtin"], 7);

    // A different name (read with nvmlDeviceGetGpuInstanceProfileInfoV).
    let mut cmd = profiles(&fake_nvml(), &[]);
    cmd.env("TESSERA_FAKE_NVML_PROFILE_PATCH", "15:name=1g.24gb");
    let (out, stdout, err) = run(cmd);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        stdout.contains(
            "difference: profile id 15: NVML reports name \"MIG 1g.24gb\", the built-in table has \"1g.20gb\""
        ),
        "{stdout}"
    );
}

#[test]
fn an_old_driver_without_placements_is_a_clear_error() {
    let (out, stdout, err) = run(profiles(&fake_nvml_old(), &[]));
    assert_eq!(out.status.code(), Some(2), "{stdout}{err}");
    assert!(
        err.contains("nvmlDeviceGetGpuInstancePossiblePlacements_v2 is missing from the loaded library (driver too old?)"),
        "{err}"
    );
    assert!(err.contains("GPU 0 (NVIDIA A100-SXM4-40GB)"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn missing_library_is_an_error() {
    let (out, _, err) = run(profiles(Path::new("/nonexistent/libnvidia-ml.so.1"), &[]));
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("/nonexistent/libnvidia-ml.so.1"), "{err}");
}

#[test]
fn sim_prints_the_builtin_tables_and_reads_nothing() {
    let (out, stdout, err) = run(tessera!["mig", "profiles", "--backend", "sim"]);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("nothing was read from hardware"), "{err}");
    assert!(
        stdout.contains("built-in: NVIDIA H200: matches the built-in table of H200-141GB"),
        "{stdout}"
    );
    assert!(stdout.contains("7g.141gb"), "{stdout}");
    let (out, _, err) = run(tessera![
        "mig",
        "profiles",
        "--backend",
        "sim",
        "--nvml.lib-path",
        "x.so"
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        err.contains("--nvml.lib-path needs --backend nvml"),
        "{err}"
    );
}

#[test]
fn a_failing_profile_read_is_an_error() {
    // A malformed patch makes the fake's profile-info call fail with NVML_ERROR_UNKNOWN.
    let mut cmd = profiles(&fake_nvml(), &[]);
    cmd.env("TESSERA_FAKE_NVML_PROFILE_PATCH", "9:starts=x");
    let (out, stdout, err) = run(cmd);
    assert_eq!(out.status.code(), Some(2), "{stdout}{err}");
    assert!(
        err.contains("GPU 0 (NVIDIA A100-SXM4-40GB): reading the MIG profile table"),
        "{err}"
    );
    assert!(err.contains("nvmlDeviceGetGpuInstanceProfileInfo"), "{err}");
}

#[test]
fn a_simulated_node_reports_its_models_tables_through_the_same_reader() {
    // `--sim.scenario` names a node: its GPUs are read through the backend spec's
    // `ProfileReader` like NVML's, one table per GPU index, each its model's built-in table.
    let (out, json, err) = run(tessera![
        "mig",
        "profiles",
        "--backend",
        "sim",
        "--sim.scenario",
        SCENARIO,
        "--format",
        "json"
    ]);
    assert_eq!(out.status.code(), Some(0), "{json}{err}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["source"], "sim");
    let tables = v["tables"].as_array().unwrap();
    assert_eq!(tables.len(), 8, "{json}");
    for (i, t) in tables.iter().enumerate() {
        assert_eq!(t["gpu"], i, "{json}");
        assert_eq!(t["comparison"]["differences"], serde_json::json!([]), "{t}");
    }
    // The same GPU names NVML (the fake, built from the same scenario) reports.
    let (_, nvml, _) = run(profiles(&fake_nvml(), &["--format", "json"]));
    let n: serde_json::Value = serde_json::from_str(&nvml).unwrap();
    let names = |v: &serde_json::Value| -> Vec<String> {
        v["tables"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(names(&v), names(&n));
}

#[test]
fn one_backend_rule_for_the_exporter_and_every_mig_verb() {
    // The flags are declared once (`tessera_core::backend::BackendSpec`): the same refusal of a
    // simulator flag on NVML from both binaries.
    let (out, _, err) = run(tessera_e2e::exporter![
        "--backend",
        "nvml",
        "--sim.node",
        "gpu-node-1",
        "--once"
    ]);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--sim.node need(s) --backend sim"), "{err}");
    for verb in ["export", "assert", "profiles"] {
        let mut cmd = tessera!["mig", verb, "--sim.node", "gpu-node-1"];
        if verb == "assert" {
            cmd.arg("plan.yaml");
        }
        let (out, _, err) = run(cmd);
        assert_eq!(out.status.code(), Some(2), "{verb}: {err}");
        assert!(
            err.contains("--sim.node need(s) --backend sim"),
            "{verb}: {err}"
        );
    }
}
