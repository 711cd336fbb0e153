//! The usage log's file: the charges' entries in chunks, appended beside the database.
//!
//! A busy chat path charges thousands of messages a second. Written into sled, every entry
//! grew the database's log and its page cache (the relay's memory climbed with the messages);
//! here the entries are plain appends to one file, and sled keeps only what must change in a
//! transaction: the keys' totals, one index entry per key and chunk (the chunk's place in the
//! file), and the file's committed length.
//!
//! Exactly once: a batch's chunks are written at the committed end before its transaction
//! commits, and the transaction records the new end. A transaction that sled runs again writes
//! the same place again; one that never commits leaves bytes past the end, which the next batch
//! overwrites and an opening cuts off. A file shorter than its committed end (a power loss
//! between sled's own background flush and the file's sync) is reported at opening; the
//! entries past its end cannot be read back, and reading a ledger that holds them says so.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::StoreError;

/// Where the committed end is kept, in the `usage` tree (whose other keys are 8-byte sequence
/// numbers of the chunks stored there before the file).
pub(super) const END: &[u8] = b"end";

/// The file's name in the database's directory.
const FILE: &str = "usage.log";

/// The usage log's file and its committed end.
pub(super) struct UsageLog {
    file: File,
    /// The committed end; held by the one batch of charges being written.
    end: Mutex<u64>,
    /// Writes made so far, and as many as the last sync covered: a flush with no charge
    /// written since the last one skips the file's sync (most flushes are of task steps).
    writes: AtomicU64,
    synced: AtomicU64,
}

impl UsageLog {
    /// Opens (or creates) the file in `dir`, cut to `committed` bytes.
    pub(super) fn open(dir: &Path, committed: u64) -> Result<UsageLog, StoreError> {
        let path = dir.join(FILE);
        let failed = |e: std::io::Error| StoreError::Backend(format!("usage log {FILE}: {e}"));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(failed)?;
        let len = file.metadata().map_err(failed)?.len();
        if len > committed {
            file.set_len(committed).map_err(failed)?;
        } else if len < committed {
            tracing::error!(
                file = %path.display(),
                len,
                committed,
                "the usage log is shorter than its committed end: charges past its end are lost"
            );
        }
        Ok(UsageLog {
            file,
            end: Mutex::new(committed),
            writes: AtomicU64::new(0),
            synced: AtomicU64::new(0),
        })
    }

    /// The committed end, held until the guard drops: the caller writes past it and moves it
    /// when its transaction commits.
    pub(super) fn end(&self) -> MutexGuard<'_, u64> {
        super::locked::locked(&self.end)
    }

    /// Writes `bytes` at `at`.
    pub(super) fn write_at(&self, bytes: &[u8], at: u64) -> Result<(), StoreError> {
        let written = self.file.write_all_at(bytes, at);
        // Counted even when it failed: part of it may have reached the file.
        self.writes.fetch_add(1, Ordering::AcqRel);
        written.map_err(|e| StoreError::Backend(format!("write usage log: {e}")))
    }

    /// Reads the chunk of `len` bytes at `at`.
    pub(super) fn read(&self, at: u64, len: u64) -> Result<Vec<u8>, StoreError> {
        let len = usize::try_from(len)
            .map_err(|_| StoreError::Backend(format!("usage log: chunk of {len} bytes")))?;
        let mut bytes = vec![0; len];
        self.file.read_exact_at(&mut bytes, at).map_err(|e| {
            StoreError::Backend(format!("read usage log at {at} ({len} bytes): {e}"))
        })?;
        Ok(bytes)
    }

    /// Puts what was written on disk (nothing to do when nothing was written since the last
    /// sync).
    pub(super) fn sync(&self) -> std::io::Result<()> {
        let seen = self.writes.load(Ordering::Acquire);
        if seen == self.synced.load(Ordering::Acquire) {
            return Ok(());
        }
        self.file.sync_data()?;
        // A write that came during the sync is not counted as covered: the next sync runs.
        self.synced.fetch_max(seen, Ordering::AcqRel);
        Ok(())
    }
}

/// A chunk's place in the file, as the `usage_by_key` index keeps it.
pub(super) fn place(at: u64, len: u64) -> [u8; 16] {
    let mut out = [0; 16];
    out[..8].copy_from_slice(&at.to_be_bytes());
    out[8..].copy_from_slice(&len.to_be_bytes());
    out
}

/// The place [`place`] wrote, or `None` for an index entry of a chunk kept in sled.
pub(super) fn parse_place(stored: &[u8]) -> Option<(u64, u64)> {
    let at = u64::from_be_bytes(stored.get(..8)?.try_into().ok()?);
    let len = u64::from_be_bytes(stored.get(8..16)?.try_into().ok()?);
    Some((at, len))
}
