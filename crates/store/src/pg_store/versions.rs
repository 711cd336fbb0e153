//! The task rows this store read or wrote last, each with its version (the row's `xmin`), so
//! that a transition of a task this instance just created, claimed or moved writes it without
//! reading it first: the compare-and-swap write ([`super::tasks::transition_alone`]) checks the
//! version, so a row another step changed meanwhile is not written and is read again. An
//! entry that is out of date costs one failed write, never a wrong one.
//!
//! Bounded: two generations of at most [`GENERATION`] entries each; when the newer one is
//! full, the older one is dropped. An entry is taken out when it is used and put back by the
//! write that used it, so the steps of a task in flight stay in the newer generation.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::Task;

/// Entries in a generation.
const GENERATION: usize = 2048;

/// A task as its row holds it at a version.
pub(super) struct Version {
    /// The row's `xmin` as text.
    pub(super) version: String,
    pub(super) task: Task,
}

#[derive(Default)]
struct Generations {
    newer: HashMap<String, Version>,
    older: HashMap<String, Version>,
}

/// The rows kept, shared by the store's clones.
#[derive(Default)]
pub(super) struct Versions {
    inner: Mutex<Generations>,
}

impl Versions {
    /// Keeps `task` as its row is at `version`, in place of what was kept of it.
    pub(super) fn put(&self, version: String, task: Task) {
        let Ok(mut g) = self.inner.lock() else {
            return;
        };
        g.older.remove(&task.id);
        if g.newer.len() >= GENERATION && !g.newer.contains_key(&task.id) {
            g.older = std::mem::take(&mut g.newer);
        }
        g.newer.insert(task.id.clone(), Version { version, task });
    }

    /// What was kept of task `id`, taken out.
    pub(super) fn take(&self, id: &str) -> Option<Version> {
        let mut g = self.inner.lock().ok()?;
        match g.newer.remove(id) {
            Some(v) => Some(v),
            None => g.older.remove(id),
        }
    }

    /// Forgets task `id` (a step wrote it without learning its version).
    pub(super) fn forget(&self, id: &str) {
        drop(self.take(id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::tid;

    fn task(id: &str) -> Task {
        crate::suite::task(id, "key_a", crate::TaskStatus::Queued, Some(1))
    }

    #[test]
    fn entries_are_taken_once_and_bounded() {
        let versions = Versions::default();
        let first = tid("task", 0);
        versions.put("1".into(), task(&first));
        let kept = versions.take(&first).map(|v| v.version);
        assert_eq!(kept.as_deref(), Some("1"));
        assert!(versions.take(&first).is_none(), "taken out when used");
        // Past two generations the oldest entries are gone, the newest kept.
        let ids: Vec<String> = (0..3 * GENERATION as u64)
            .map(|i| tid("task", i + 1))
            .collect();
        for (i, id) in ids.iter().enumerate() {
            versions.put(i.to_string(), task(id));
        }
        let g = versions.inner.lock().unwrap();
        assert!(g.newer.len() + g.older.len() <= 2 * GENERATION);
        drop(g);
        assert!(versions.take(&ids[0]).is_none());
        let last = versions.take(&ids[3 * GENERATION - 1]).map(|v| v.version);
        assert_eq!(last, Some((3 * GENERATION - 1).to_string()));
    }
}
