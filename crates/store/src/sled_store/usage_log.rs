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

use foldhash::HashMap;

use crate::StoreError;

/// Where the committed end is kept, in the `usage` tree (whose other keys are 8-byte sequence
/// numbers of the chunks stored there before the file).
pub(super) const END: &[u8] = b"end";

/// The file's name in the database's directory.
const FILE: &str = "usage.log";

/// The usage log's file and its committed end.
pub(super) struct UsageLog {
    file: File,
    /// The committed end and the keys' open runs; held by the one batch of charges being
    /// written.
    end: Mutex<Tail>,
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
            end: Mutex::new(Tail {
                at: committed,
                runs: HashMap::default(),
            }),
            writes: AtomicU64::new(0),
            synced: AtomicU64::new(0),
        })
    }

    /// The committed end, held until the guard drops: the caller writes past it and moves it
    /// when its transaction commits.
    pub(super) fn end(&self) -> MutexGuard<'_, Tail> {
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

/// The end of the log as the batch that holds it sees it.
pub(super) struct Tail {
    /// The committed end.
    pub at: u64,
    /// Each key's open run as of the committed end, once looked up: the `usage_by_key` entry
    /// that its next chunk extends, or none to start a new one.
    pub runs: HashMap<String, Option<OpenRun>>,
}

/// A key's `usage_by_key` entry that still takes chunks ([`RUN_CHUNKS`] at the most).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct OpenRun {
    pub index_key: Vec<u8>,
    pub chunks: usize,
}

/// The most chunks one `usage_by_key` entry lists. Every entry of sled's tree stays in its
/// page cache, about 160 bytes of the relay's memory each, and a busy chat path writes a
/// chunk some 40 times a second: one entry per chunk grew the relay by about 0.4 MiB a minute.
/// A run of 32 takes 24 bytes a chunk and a new entry every 32 chunks; reading a key's ledger
/// reads the same chunks as before.
pub(super) const RUN_CHUNKS: usize = 32;

/// The first byte of a run's value: chunks listed as `(seq, at, len)`, each a big-endian u64.
const RUN: u8 = b'r';
const RUN_ITEM: usize = 24;

/// A run's value with one more chunk: `seq` (its sequence number), at `at`, `len` bytes.
pub(super) fn run_with(run: Option<&[u8]>, seq: u64, at: u64, len: u64) -> Vec<u8> {
    let old = run.filter(|v| is_run(v)).unwrap_or(&[RUN]);
    let mut out = Vec::with_capacity(old.len() + RUN_ITEM);
    out.extend_from_slice(old);
    for n in [seq, at, len] {
        out.extend_from_slice(&n.to_be_bytes());
    }
    out
}

/// Whether a `usage_by_key` value is a run (else a place of one chunk, or empty).
pub(super) fn is_run(stored: &[u8]) -> bool {
    stored.first() == Some(&RUN) && (stored.len() - 1).is_multiple_of(RUN_ITEM)
}

/// How many chunks a `usage_by_key` value lists: a run's count, 1 for any other value.
pub(super) fn chunks_in(stored: &[u8]) -> usize {
    if is_run(stored) {
        (stored.len() - 1) / RUN_ITEM
    } else {
        1
    }
}

/// The chunks a `usage_by_key` entry stands for, with their sequence numbers: a run's list;
/// a place of one chunk (as versions before runs wrote it) under `seq`, the entry's own; or,
/// for an entry of a chunk kept in sled (empty), `seq` with no place.
pub(super) fn chunks(stored: &[u8], seq: u64) -> Vec<(u64, Option<(u64, u64)>)> {
    if is_run(stored) {
        let n = |b: &[u8]| u64::from_be_bytes(b.try_into().unwrap_or_default());
        return stored[1..]
            .chunks_exact(RUN_ITEM)
            .map(|c| (n(&c[..8]), Some((n(&c[8..16]), n(&c[16..])))))
            .collect();
    }
    vec![(seq, parse_place(stored))]
}

/// A chunk's place in the file, as the `usage_by_key` index kept it before runs.
#[cfg(test)]
pub(super) fn place(at: u64, len: u64) -> [u8; 16] {
    let mut out = [0; 16];
    out[..8].copy_from_slice(&at.to_be_bytes());
    out[8..].copy_from_slice(&len.to_be_bytes());
    out
}

/// The place [`place`] wrote, or `None` for an index entry of a chunk kept in sled.
fn parse_place(stored: &[u8]) -> Option<(u64, u64)> {
    if stored.len() != 16 {
        return None;
    }
    let at = u64::from_be_bytes(stored.get(..8)?.try_into().ok()?);
    let len = u64::from_be_bytes(stored.get(8..16)?.try_into().ok()?);
    Some((at, len))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run lists its chunks in order; a value of the earlier forms stands for one chunk.
    #[test]
    fn index_values_of_every_form() {
        let one = run_with(None, 7, 0, 100);
        let two = run_with(Some(&one), 9, 100, 50);
        assert_eq!((chunks_in(&one), chunks_in(&two)), (1, 2));
        assert_eq!(chunks(&two, 1), [(7, Some((0, 100))), (9, Some((100, 50)))]);
        assert_eq!(chunks(&place(5, 6), 3), [(3, Some((5, 6)))]);
        assert_eq!(chunks_in(&place(5, 6)), 1);
        assert_eq!(chunks(&[], 4), [(4, None)]);
        // A 16-byte place that happens to begin with the run's byte is still a place.
        let odd = place(u64::from(RUN) << 56, 6);
        assert_eq!(chunks(&odd, 2), [(2, Some((u64::from(RUN) << 56, 6)))]);
    }
}
