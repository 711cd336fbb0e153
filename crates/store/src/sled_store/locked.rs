//! [`locked`]: the sled store's mutexes, taken even when poisoned.

/// `mutex` locked; a poisoned lock is taken as it is (the state it guards is kept consistent
/// by each holder before anything can panic).
pub(super) fn locked<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
