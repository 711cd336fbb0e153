//! Counts of each channel's upstream calls since start, for `/admin/channels`.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counts of one channel's upstream calls since start.
#[derive(Debug, Default)]
pub struct ChannelStats {
    calls: AtomicU64,
    failures: AtomicU64,
}

impl ChannelStats {
    pub fn record(&self, ok: bool) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        if !ok {
            self.failures.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// (calls, failures).
    pub fn totals(&self) -> (u64, u64) {
        (
            self.calls.load(Ordering::Relaxed),
            self.failures.load(Ordering::Relaxed),
        )
    }
}
