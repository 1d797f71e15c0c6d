//! The repository's test data (`testdata/` at the workspace root): upstream Dynamo manifests and
//! the third-party CRDs the tests install. Every test, the bench and the reliability suite find
//! it here; `CONFORMANCE_DIR` overrides the folder (for trying another corpus).

use std::path::{Path, PathBuf};

/// The environment variable that replaces the folder.
pub const OVERRIDE: &str = "CONFORMANCE_DIR";

/// The test-data folder: `$CONFORMANCE_DIR`, else `testdata/` of this repository.
pub fn dir() -> PathBuf {
    match std::env::var_os(OVERRIDE) {
        Some(dir) => PathBuf::from(dir),
        None => in_repository(),
    }
}

/// `testdata/` of this repository.
fn in_repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata")
}

/// A file or folder of the test data, by its path relative to [`dir`].
pub fn path(relative: impl AsRef<Path>) -> PathBuf {
    dir().join(relative)
}

/// The text of a test-data file; panics naming the path when it cannot be read.
pub fn read(relative: impl AsRef<Path>) -> String {
    let path = path(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The `*.yaml` files of a test-data folder, sorted (none when the folder does not exist).
pub fn yaml_files(folder: impl AsRef<Path>) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(path(folder))
        .map(|entries| entries.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"));
    files.sort();
    files
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_folder_is_in_the_repository() {
        let dir = super::in_repository()
            .canonicalize()
            .expect("testdata/ exists");
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .canonicalize()
            .unwrap();
        assert!(
            dir.starts_with(&root),
            "{} is outside {}",
            dir.display(),
            root.display()
        );
        for folder in [
            "v1beta1",
            "v1alpha1",
            "checkpoint",
            "grove-crds",
            "lws-crds",
            "gaie-crds",
        ] {
            assert!(dir.join(folder).is_dir(), "testdata/{folder}");
        }
    }
}
