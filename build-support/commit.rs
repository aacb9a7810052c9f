// Included (`include!`) by `analyzer/build.rs` and `exporter/build.rs`: records the commit the
// binary is built from as `TESSERA_COMMIT` (shown by `--version`): `git rev-parse --short=12
// HEAD`, or `unknown` outside a git checkout (a source tarball, `cargo install` from a copy);
// `TESSERA_BUILD_COMMIT` in the build's environment wins (its first 12 characters: a build
// without `.git`, such as deploy/images/Containerfile's, passes the revision it knows).
// Uncommitted changes are not marked (the mark would go stale without a commit to re-run on).
//
// Re-runs when HEAD or the branch it points to moves, and only then. Cargo treats a watched path
// that does not exist as changed on every build (which recompiles the whole binary), so only
// paths that exist are watched, chosen afresh each time the script runs:
// - HEAD (a checkout or a detached HEAD rewrites it);
// - the branch's loose ref (`refs/heads/<branch>`) when it exists: it is what holds the branch;
// - otherwise `packed-refs` (when it exists) and the nearest existing folder above the loose
//   ref, so that the next commit, which writes the loose ref, is noticed;
// - a reftable repository's `reftable/` folder (every ref update rewrites it).
// Outside a git checkout nothing but this file and build.rs is watched.

fn git(args: &[&str]) -> Option<String> {
    let out = std::process::Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
}

/// The paths (that exist now) whose change means HEAD or its branch may have moved.
fn commit_watch_paths() -> Vec<std::path::PathBuf> {
    use std::path::{Path, PathBuf};
    let git_path = |p: &str| git(&["rev-parse", "--git-path", p]).map(PathBuf::from);
    let mut watch = Vec::new();
    let Some(head) = git_path("HEAD").filter(|p| p.is_file()) else {
        return watch; // not a git checkout
    };
    watch.push(head);
    if let Some(reftable) = git_path("reftable").filter(|p| p.is_dir()) {
        watch.push(reftable);
        return watch;
    }
    // A detached HEAD has no branch: HEAD itself holds the commit.
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        match git_path(&branch) {
            Some(loose) if loose.is_file() => watch.push(loose),
            Some(loose) => {
                if let Some(packed) = git_path("packed-refs").filter(|p| p.is_file()) {
                    watch.push(packed);
                }
                // Never above `refs/`: a folder outside it changes for other reasons.
                if let Some(refs) = git_path("refs") {
                    let folder = loose
                        .ancestors()
                        .skip(1)
                        .find(|p| p.starts_with(&refs) && p.is_dir())
                        .map(Path::to_path_buf);
                    watch.extend(folder);
                }
            }
            None => {}
        }
    }
    watch
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
    for path in commit_watch_paths() {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    println!("cargo:rerun-if-changed=../build-support/commit.rs");
    println!("cargo:rerun-if-changed=build.rs");
}
