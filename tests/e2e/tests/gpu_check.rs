//! The GPU check kit (`scripts/gpu-check.sh`, issue 28) run here against the fake
//! `libnvidia-ml.so`, so that it cannot rot between the rare chances to run it on a real GPU:
//! the same script, the real binaries, a stand-in `nvidia-smi` that prints what the fake library
//! holds (through `scripts/gpu-check-read.py`, ctypes: not tessera's code). It must produce one
//! archive with the exporter's and the readers' views and no difference between them; a
//! stand-in that reports another temperature must show as a difference.

use std::path::{Path, PathBuf};
use std::process::Command;

use tessera_e2e::{exporter, fake_nvml, replay, repo_root, run, target_profile_dir, tessera};

const SCENARIO: &str = "fixtures/scenarios/mig-node.toml";

/// A stand-in `nvidia-smi` in `dir`: `-q -x` prints a minimal log, `--query-gpu` goes to the
/// ctypes reader on the fake library; `temp_offset` is added to temperature.gpu.
fn stand_in(dir: &Path, temp_offset: i32) {
    let script = format!(
        "#!/bin/sh\ncase \"$1\" in\n  -q) echo '<?xml version=\"1.0\"?><nvidia_smi_log><driver_version>fake</driver_version></nvidia_smi_log>' ;;\n  *) python3 {reader} --lib {lib} \"$@\" | awk -F', ' 'BEGIN {{OFS=\", \"}} {{ $7 = $7 + {temp_offset}; print }}' ;;\nesac\n",
        reader = repo_root().join("scripts/gpu-check-read.py").display(),
        lib = fake_nvml().display(),
    );
    let p = dir.join("nvidia-smi");
    std::fs::write(&p, script).unwrap();
    let mut perm = std::fs::metadata(&p).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    std::fs::set_permissions(&p, perm).unwrap();
}

/// Runs the kit with the stand-in first on PATH; returns the unpacked folder and stderr.
fn kit(temp_offset: i32) -> (tempfile::TempDir, PathBuf, String) {
    // Both binaries built and up to date (the macros build them once per process).
    let _ = (exporter!["--version"], tessera!["--version"]);
    let tmp = tempfile::tempdir().unwrap();
    let smi = tmp.path().join("smi");
    std::fs::create_dir(&smi).unwrap();
    stand_in(&smi, temp_offset);
    let out = tmp.path().join("out");
    let path = format!(
        "{}:{}",
        smi.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = Command::new("bash");
    cmd.arg(repo_root().join("scripts/gpu-check.sh"))
        .args(["--seconds", "5", "--out"])
        .arg(&out)
        .arg("--bin")
        .arg(target_profile_dir())
        .arg("--nvml-lib")
        .arg(fake_nvml())
        .env("PATH", path)
        .env("TESSERA_FAKE_NVML_SCENARIO", repo_root().join(SCENARIO))
        .env("TESSERA_FAKE_NVML_TIME", "2026-11-02T14:00:00Z");
    let (o, stdout, err) = run(cmd);
    assert_eq!(o.status.code(), Some(0), "{stdout}{err}");
    let archives: Vec<PathBuf> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(archives.len(), 1, "one archive: {archives:?}");
    let name = archives[0]
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert!(
        name.chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)),
        "{name}"
    );
    assert_eq!(stdout.trim(), archives[0].display().to_string());
    let unpacked = tmp.path().join("unpacked");
    std::fs::create_dir(&unpacked).unwrap();
    let st = Command::new("tar")
        .arg("-C")
        .arg(&unpacked)
        .arg("-xzf")
        .arg(&archives[0])
        .status()
        .unwrap();
    assert!(st.success());
    let rec = unpacked.join("gpu-check");
    (tmp, rec, err)
}

fn json(p: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn the_kit_records_the_exporter_and_two_independent_readers_and_they_agree() {
    let (_tmp, rec, err) = kit(0);
    let summary = std::fs::read_to_string(rec.join("summary.txt")).unwrap();
    assert!(
        summary.contains("load: none (PyTorch with CUDA is not installed here)"),
        "{summary}"
    );
    assert!(summary.contains("compare: 0 of"), "{summary}\n{err}");
    // The exporter's view, the ctypes reader's (every call with its return code), the stand-in
    // nvidia-smi's, the MIG tables, /metrics and the sample timings.
    let once = json(&rec.join("exporter-once.json"));
    assert_eq!(once["sample"]["gpus"].as_array().unwrap().len(), 4);
    let reader = json(&rec.join("reader-0.json"));
    assert!(
        reader["calls"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["fn"] == "nvmlDeviceGetMemoryInfo_v2" && c["ret"] == "SUCCESS")
    );
    let cmp = json(&rec.join("compare.json"));
    assert_eq!(cmp["differences"], 0, "{cmp}");
    // Reader and nvidia-smi both compared, for every GPU.
    assert!(cmp["compared"].as_u64().unwrap() >= 4 * 12, "{cmp}");
    assert_eq!(
        cmp["gpus"][0]["fields"]["temperature_celsius"]["agrees"],
        serde_json::json!({"reader": true, "nvidia-smi": true})
    );
    assert_eq!(
        json(&rec.join("mig-profiles.json"))["format"],
        "tessera-mig-profiles"
    );
    let metrics = std::fs::read_to_string(rec.join("metrics-0.prom")).unwrap();
    let log = |f: &str| std::fs::read_to_string(rec.join("logs").join(f)).unwrap_or_default();
    assert!(
        metrics.contains("tessera_gpu_memory_used_bytes{"),
        "{summary}\n{}\n{}",
        log("exporter-serve.err"),
        log("curl.err")
    );
    let timings = std::fs::read_to_string(rec.join("timings.txt")).unwrap();
    assert!(
        timings.contains("tessera_exporter_sample_duration"),
        "{timings}"
    );
    assert!(rec.join("nvidia-smi-q.xml").exists());

    // Every NVML call of the exporter, with its return code, value and duration, and the
    // timings per function made of them.
    let calls: Vec<serde_json::Value> = std::fs::read_to_string(rec.join("nvml-serve.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let power = calls
        .iter()
        .find(|c| c["function"] == "nvmlDeviceGetPowerUsage" && c["gpu"] == 0)
        .expect("a power reading recorded");
    assert_eq!(power["rc"], "success");
    assert!(power["value"].as_u64().unwrap() > 0 && power["micros"].as_f64().is_some());
    assert!(
        calls
            .iter()
            .any(|c| c["function"] == "(sample)" && c["value"]["timestamp_ms"].is_i64())
    );
    let t = json(&rec.join("timings.json"));
    let row = t["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["function"] == "nvmlDeviceGetMemoryInfo_v2" && r["gpu"] == 0)
        .expect("memory reads timed");
    assert!(row["calls"].as_u64().unwrap() >= 2 && row["p50_us"].as_f64().is_some());
    // NVIDIA's binding (nvidia-ml-py) read GPM and the processes.
    let gpm = json(&rec.join("gpm.json"));
    assert_eq!(gpm["gpus"][0]["gpm_supported"], true, "{gpm}");
    assert!(gpm["gpus"][0]["gpm"]["sm_util"]["rc"] == 0, "{gpm}");
    assert_eq!(
        gpm["gpus"][0]["processes"][0]["pid"],
        once["sample"]["gpus"][0]["processes"][0]["pid"]
    );

    // The recorded library replays the recording: the same --once and the same series per scrape.
    let d = replay::once_differences(&rec);
    assert!(d.is_empty(), "{}", d.join("\n"));
    let scraped = replay::scrapes(&rec);
    assert_eq!(scraped.len(), 1, "one scrape with --seconds 5");
    for (file, samples) in scraped {
        let d = replay::metrics_differences(&rec, &file, samples, 100);
        assert!(d.is_empty(), "{file}: {}", d.join("\n"));
    }

    // The history the exporter recorded while serving, read back by ingest, analyze and report.
    assert!(!summary.contains("step history-"), "{summary}");
    assert!(rec.join("history").is_dir());
    let ingest = json(&rec.join("history-ingest.json"));
    let gpu = ingest["tables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["table"] == "gpu")
        .unwrap_or_else(|| panic!("{ingest}"));
    assert_eq!(gpu["entities"], 4, "{ingest}");
    assert!(gpu["rows"].as_u64().unwrap() >= 4, "{ingest}");
    let analyze = json(&rec.join("history-analyze.json"));
    assert!(analyze.is_object(), "{analyze}");
    let report = json(&rec.join("history-report.json"));
    assert!(report.is_object(), "{report}");
}

#[test]
fn a_reader_that_disagrees_shows_as_a_difference() {
    let (_tmp, rec, _) = kit(10);
    let cmp = json(&rec.join("compare.json"));
    assert_eq!(cmp["differences"], 4, "one temperature per GPU: {cmp}");
    assert_eq!(
        cmp["gpus"][0]["fields"]["temperature_celsius"]["agrees"]["nvidia-smi"],
        false
    );
    let summary = std::fs::read_to_string(rec.join("summary.txt")).unwrap();
    assert!(summary.contains("compare: 4 of"), "{summary}");
}
