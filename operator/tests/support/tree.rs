//! Where the repository's tree is, for test binaries that run from a copy of it somewhere
//! else: the GPU machine gets the tree (and the test binaries in `.carry/`) at another path
//! than the one they were built in, so no test may find its files through the build's
//! absolute paths (`CARGO_MANIFEST_DIR`). Included with `#[path]` by the GPU test binaries.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// The variable that names the tree's root (`scripts/gpu-tests.sh run` sets it).
pub const ROOT_VAR: &str = "ROCELINK_REPO_ROOT";

/// A file only the repository's root has.
pub const MARKER: &str = "kernels/abi.h";

/// The root given by `given` (it must hold [`MARKER`]), or else the first folder at or above
/// `start` that holds it.
pub fn find_root(given: Option<&Path>, start: &Path) -> Result<PathBuf, String> {
    if let Some(root) = given {
        return if root.join(MARKER).is_file() {
            Ok(root.to_path_buf())
        } else {
            Err(format!("{ROOT_VAR}={} has no {MARKER}: not the repository's root", root.display()))
        };
    }
    start.ancestors().find(|d| d.join(MARKER).is_file()).map(Path::to_path_buf).ok_or_else(|| {
        format!(
            "no folder at or above {} holds {MARKER}: run inside the repository's tree, or set {ROOT_VAR} to its root",
            start.display()
        )
    })
}

/// The tree this test runs in: `$ROCELINK_REPO_ROOT`, or the first folder at or above the
/// current directory that holds [`MARKER`]. Panics with what to do when there is none.
pub fn repo_root() -> PathBuf {
    let given = std::env::var_os(ROOT_VAR).map(PathBuf::from);
    let cwd = std::env::current_dir().unwrap_or_else(|e| panic!("the current directory: {e}"));
    find_root(given.as_deref(), &cwd).unwrap_or_else(|e| panic!("{e}"))
}

/// The committed QEC fixtures (`operator/tests/fixtures/qec`) of this tree.
pub fn qec_fixtures() -> PathBuf {
    repo_root().join("operator/tests/fixtures/qec")
}

#[test]
fn the_root_is_found_from_anywhere_inside_it_or_named() {
    let base = std::env::temp_dir().join(format!("rocelink-tree-{}-{}", std::process::id(), line!()));
    let deep = base.join("copy/operator/tests");
    std::fs::create_dir_all(&deep).unwrap();
    std::fs::create_dir_all(base.join("copy/kernels")).unwrap();
    std::fs::write(base.join("copy").join(MARKER), "").unwrap();
    let root = base.join("copy");
    assert_eq!(find_root(None, &deep).unwrap(), root);
    assert_eq!(find_root(None, &root).unwrap(), root);
    assert_eq!(find_root(Some(&root), Path::new("/")).unwrap(), root);
    // A named root must be one; outside every tree there is none.
    assert!(find_root(Some(&deep), &deep).unwrap_err().contains(ROOT_VAR));
    assert!(find_root(None, &base).unwrap_err().contains(MARKER));
    let _ = std::fs::remove_dir_all(&base);
}
