// Included (`include!`) by `analyzer/build.rs` and `exporter/build.rs`: records the commit the
// binary is built from as `TESSERA_COMMIT` (shown by `--version`): `git rev-parse --short=12
// HEAD`, or `unknown` outside a git checkout (a source tarball, `cargo install` from a copy);
// `TESSERA_BUILD_COMMIT` in the build's environment wins (its first 12 characters: a build
// without `.git`, such as deploy/images/Containerfile's, passes the revision it knows).
// Re-runs when HEAD or the branch it points to moves. Uncommitted changes are not marked (the
// mark would go stale without a commit to re-run on).

fn git(args: &[&str]) -> Option<String> {
    let out = std::process::Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
}

fn record_commit() {
    println!("cargo:rerun-if-env-changed=TESSERA_BUILD_COMMIT");
    let given = std::env::var("TESSERA_BUILD_COMMIT")
        .ok()
        .map(|c| c.trim().chars().take(12).collect::<String>())
        .filter(|c| !c.is_empty() && c.chars().all(|ch| ch.is_ascii_alphanumeric()));
    let commit = given
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=TESSERA_COMMIT={commit}");
    for path in [
        Some("HEAD".to_string()),
        git(&["symbolic-ref", "-q", "HEAD"]),
    ]
    .into_iter()
    .flatten()
    .chain(std::iter::once("packed-refs".to_string()))
    {
        if let Some(p) = git(&["rev-parse", "--git-path", &path]) {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    println!("cargo:rerun-if-changed=../build-support/commit.rs");
    println!("cargo:rerun-if-changed=build.rs");
}
