//! Helpers shared by the crate's tests.

use std::path::{Path, PathBuf};

use crate::SledStore;

/// A fresh directory under the system temp dir, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new() -> TempDir {
        let path = std::env::temp_dir().join(format!("relay-store-test-{}", ulid::Ulid::new()));
        std::fs::create_dir_all(&path).expect("create temp dir");
        TempDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A store in a fresh directory, which lives as long as the [`TempDir`].
pub fn open_store() -> (TempDir, SledStore) {
    let dir = TempDir::new();
    let store = SledStore::open(dir.path()).expect("open store");
    (dir, store)
}

/// `prefix_<ULID>` whose ULID encodes time `n`, so ids sort by `n`.
pub fn tid(prefix: &str, n: u64) -> String {
    format!(
        "{prefix}_{}",
        ulid::Ulid::from_parts(1_700_000_000_000 + n, 0)
    )
}
