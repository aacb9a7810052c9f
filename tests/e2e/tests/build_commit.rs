//! The build scripts' commit rule (`build-support/commit.rs`, issue 47): a build that changes
//! nothing compiles nothing, in a `git init` checkout without `packed-refs`, after `git pack-refs
//! --all`, on a detached HEAD and outside git; and a new commit is picked up by the next build.
//! Runs real cargo and git on a small crate that includes the same file, in a temporary folder.

use std::path::{Path, PathBuf};
use std::process::Command;

use tessera_e2e::repo_root;

const PROBE: &str = "commit-probe";

/// A command with the variables cargo set for this test binary, and git's and tessera's own,
/// removed: the probe crate's build must see a plain environment.
fn plain(program: &str) -> Command {
    let mut cmd = Command::new(program);
    for (key, _) in std::env::vars_os() {
        let k = key.to_string_lossy();
        if k.starts_with("CARGO_")
            || k.starts_with("GIT_")
            || k == "OUT_DIR"
            || k == "TESSERA_BUILD_COMMIT"
        {
            cmd.env_remove(&key);
        }
    }
    cmd
}

fn git(repo: &Path, args: &[&str]) -> String {
    let out = plain("git")
        .args([
            "-c",
            "user.name=tessera test",
            "-c",
            "user.email=test@example.invalid",
            "-c",
            "commit.gpgsign=false",
            "-c",
            "core.hooksPath=/dev/null",
        ])
        .args(args)
        .current_dir(repo)
        .output()
        .expect("running git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

struct Probe {
    _dir: tempfile::TempDir,
    repo: PathBuf,
    target: PathBuf,
}

impl Probe {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("tmp");
        let repo = dir.path().join("repo");
        let target = dir.path().join("target");
        std::fs::create_dir_all(repo.join("build-support")).unwrap();
        std::fs::create_dir_all(repo.join("app/src")).unwrap();
        std::fs::copy(
            repo_root().join("build-support/commit.rs"),
            repo.join("build-support/commit.rs"),
        )
        .expect("copying build-support/commit.rs");
        std::fs::write(
            repo.join("app/Cargo.toml"),
            format!(
                "[package]\nname = \"{PROBE}\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\n[workspace]\n"
            ),
        )
        .unwrap();
        std::fs::write(
            repo.join("app/build.rs"),
            "include!(\"../build-support/commit.rs\");\n\nfn main() {\n    record_commit();\n}\n",
        )
        .unwrap();
        std::fs::write(
            repo.join("app/src/main.rs"),
            "fn main() {\n    println!(\"{}\", env!(\"TESSERA_COMMIT\"));\n}\n",
        )
        .unwrap();
        std::fs::write(repo.join("README"), "one\n").unwrap();
        git(&repo, &["init", "-q", "-b", "main"]);
        git(&repo, &["add", "-A"]);
        git(&repo, &["commit", "-q", "-m", "first"]);
        Probe {
            _dir: dir,
            repo,
            target,
        }
    }

    /// Builds the probe; returns whether the crate was compiled (not fresh) and the commit the
    /// binary says.
    fn build(&self) -> (bool, String) {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let out = plain(&cargo)
            .args(["build", "-v", "--offline"])
            .env("CARGO_TARGET_DIR", &self.target)
            .current_dir(self.repo.join("app"))
            .output()
            .expect("running cargo build");
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "cargo build of the probe: {err}");
        let compiled = err.contains(&format!("Compiling {PROBE}"));
        let fresh = err.contains(&format!("Fresh {PROBE}"));
        assert!(
            compiled != fresh,
            "neither or both compiled and fresh: {err}"
        );
        let run = Command::new(self.target.join("debug").join(PROBE))
            .output()
            .expect("running the probe");
        assert!(run.status.success());
        (
            compiled,
            String::from_utf8_lossy(&run.stdout).trim().to_string(),
        )
    }

    fn head(&self) -> String {
        git(&self.repo, &["rev-parse", "--short=12", "HEAD"])
    }

    fn commit(&self, text: &str) {
        std::fs::write(self.repo.join("README"), text).unwrap();
        git(&self.repo, &["commit", "-q", "-a", "-m", text]);
    }
}

#[test]
fn builds_that_change_nothing_compile_nothing_and_commits_are_picked_up() {
    let p = Probe::new();
    let git_dir = p.repo.join(".git");
    // The trap's condition: a fresh `git init` has no packed-refs.
    assert!(!git_dir.join("packed-refs").exists());
    assert!(git_dir.join("refs/heads/main").is_file());

    let (compiled, commit) = p.build();
    assert!(compiled);
    assert_eq!(commit, p.head());
    let (compiled, _) = p.build();
    assert!(!compiled, "second build without packed-refs recompiled");

    // A commit on the loose branch is picked up, then nothing again.
    p.commit("two\n");
    let (compiled, commit) = p.build();
    assert!(compiled, "a new commit was not picked up");
    assert_eq!(commit, p.head());
    assert!(!p.build().0);

    // Refs packed: the loose ref is gone, packed-refs holds the branch.
    git(&p.repo, &["pack-refs", "--all"]);
    assert!(git_dir.join("packed-refs").is_file());
    assert!(!git_dir.join("refs/heads/main").exists());
    let (_, commit) = p.build();
    assert_eq!(commit, p.head());
    let (compiled, _) = p.build();
    assert!(!compiled, "second build after pack-refs recompiled");

    // A commit with packed refs writes a new loose ref: the next build sees the new commit.
    let before = p.head();
    p.commit("three\n");
    assert_ne!(p.head(), before);
    let (compiled, commit) = p.build();
    assert!(compiled, "a commit after pack-refs was not picked up");
    assert_eq!(commit, p.head());
    assert!(!p.build().0);

    // A detached HEAD (the commit before): picked up, then nothing.
    git(&p.repo, &["checkout", "-q", "--detach", "HEAD~1"]);
    let (compiled, commit) = p.build();
    assert!(compiled);
    assert_eq!(commit, before);
    assert!(!p.build().0, "second build on a detached HEAD recompiled");

    // Back on the branch.
    git(&p.repo, &["checkout", "-q", "main"]);
    let (_, commit) = p.build();
    assert_eq!(commit, p.head());
    assert!(!p.build().0);

    // Outside git: `unknown`, and nothing rebuilt after that.
    std::fs::remove_dir_all(&git_dir).unwrap();
    let (compiled, commit) = p.build();
    assert!(compiled);
    assert_eq!(commit, "unknown");
    assert!(!p.build().0, "second build outside git recompiled");
}
