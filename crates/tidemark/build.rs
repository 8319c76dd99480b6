//! Names the commit the binary is built from, for `tidemark --version`: `TIDEMARK_COMMIT` when
//! the builder sets it (a package built from a source archive), else what `git` says about the
//! checkout, else "unknown".

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=TIDEMARK_COMMIT");
    let commit = std::env::var("TIDEMARK_COMMIT")
        .ok()
        .filter(|commit| !commit.trim().is_empty())
        .or_else(git_commit)
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=TIDEMARK_COMMIT={}", commit.trim());
}

fn git(args: &[&str]) -> Option<String> {
    let output = Command::new("git")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
        .filter(|text| !text.is_empty())
}

fn git_commit() -> Option<String> {
    let git_dir = PathBuf::from(git(&["rev-parse", "--absolute-git-dir"])?);
    // Built again when HEAD moves: a new commit on the branch, or another branch checked out.
    // Only files that exist are watched (cargo reruns every build for one that does not).
    // A worktree keeps its HEAD apart and its branches in the common folder.
    let common = git(&["rev-parse", "--path-format=absolute", "--git-common-dir"])
        .map_or_else(|| git_dir.clone(), PathBuf::from);
    let head = git_dir.join("HEAD");
    watch(&head);
    if let Ok(text) = std::fs::read_to_string(&head) {
        if let Some(branch) = text.trim().strip_prefix("ref: ") {
            watch(&common.join(branch));
        }
    }
    watch(&common.join("packed-refs"));
    git(&["rev-parse", "--short=12", "HEAD"])
}

fn watch(path: &Path) {
    if path.exists() {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}
