//! Files tessera rewrites are replaced atomically (issue 49, finding 5): `tessera replay
//! --write-prediction` rewrites the plan it replays; a write cut short — here by a file-size
//! limit (`ulimit -f`, with SIGXFSZ ignored so the write fails with EFBIG as on a full disk) —
//! leaves the original plan byte for byte, never a truncated one; and `--out` naming the plan is
//! refused before anything is written.

use std::path::Path;
use std::process::Command;

use crate::support::cli::run;

fn demo() -> String {
    format!(
        "history:{}",
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fixtures/demo-history")
            .display()
    )
}

#[test]
fn a_prediction_write_cut_short_leaves_the_plan_intact() {
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.yaml");
    let source = demo();
    let (code, _, err) = run(&[
        "mig",
        "plan",
        "--source",
        &source,
        "-o",
        plan.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let before = std::fs::read(&plan).unwrap();
    // The plan is larger than the limit, so rewriting it in place would truncate it.
    assert!(before.len() > 2048, "{} bytes", before.len());
    let out = Command::new("bash")
        .arg("-c")
        .arg("trap '' XFSZ; ulimit -f 2; exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_tessera"))
        .args([
            "replay",
            "--source",
            &source,
            "--plan",
            plan.to_str().unwrap(),
            "--write-prediction",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(
        out.status.code(),
        Some(0),
        "the write cannot succeed: {err}"
    );
    assert!(
        err.contains("plan.yaml") && err.contains("not changed"),
        "{err}"
    );
    assert_eq!(std::fs::read(&plan).unwrap(), before, "the plan changed");
    tessera_core::mig::plan::TesseraPlan::parse(&String::from_utf8_lossy(&before), "plan.yaml")
        .unwrap();
    // No temporary file is left beside it.
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, vec!["plan.yaml".to_string()]);
    // Without the limit the same command writes the prediction into the plan.
    let (code, _, err) = run(&[
        "replay",
        "--source",
        &source,
        "--plan",
        plan.to_str().unwrap(),
        "--write-prediction",
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let after = std::fs::read_to_string(&plan).unwrap();
    let p = tessera_core::mig::plan::TesseraPlan::parse(&after, "plan.yaml").unwrap();
    assert!(p.prediction.is_some());
}

#[test]
fn out_naming_the_plan_is_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.yaml");
    let source = demo();
    let (code, _, err) = run(&[
        "mig",
        "plan",
        "--source",
        &source,
        "-o",
        plan.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let before = std::fs::read(&plan).unwrap();
    // The same file by another spelling.
    let other = dir.path().join(".").join("plan.yaml");
    let (code, _, err) = run(&[
        "replay",
        "--source",
        &source,
        "--plan",
        plan.to_str().unwrap(),
        "--write-prediction",
        "--out",
        other.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("same file as --plan"), "{err}");
    assert_eq!(std::fs::read(&plan).unwrap(), before);
}
