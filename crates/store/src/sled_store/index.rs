//! Secondary index keys: `parent \0 child` pairs and the ordered, cursored range of one
//! parent's children; keys that lead with a time (8 bytes big-endian), so that an index reads
//! earliest first; moving an entry when the key of its record changes.

use std::ops::Bound;

use sled::transaction::TransactionalTree;
use sled::{IVec, Tree};

use super::record::{backend, corrupt};
use super::txn::TxResult;
use crate::{Order, StoreError};

/// `parent \0`: the start of every key of `parent`'s children.
pub(super) fn prefix(parent: &str) -> Vec<u8> {
    [parent.as_bytes(), &[0]].concat()
}

/// `parent \0 id`.
pub(super) fn pair_key(parent: &str, id: &str) -> Vec<u8> {
    [parent.as_bytes(), &[0], id.as_bytes()].concat()
}

/// The children (what follows `prefix`, which ends in `\0`) in an index, in `order`, strictly
/// past the child `after`; lazily, so a caller that filters reads only as far as it needs.
/// `what` names the read in an error.
pub(super) fn children<'a>(
    tree: &'a Tree,
    prefix: Vec<u8>,
    after: Option<&str>,
    order: Order,
    what: &'static str,
) -> Box<dyn Iterator<Item = Result<Vec<u8>, StoreError>> + 'a> {
    let mut upper = prefix.clone();
    // The prefix ends in `\0`; bumping it bounds the range to this parent.
    if let Some(last) = upper.last_mut() {
        *last = 1;
    }
    let cursor = after.map(|a| [prefix.as_slice(), a.as_bytes()].concat());
    let (lo, hi) = match (order, cursor) {
        (Order::Desc, Some(c)) => (Bound::Included(prefix.clone()), Bound::Excluded(c)),
        (Order::Asc, Some(c)) => (Bound::Excluded(c), Bound::Excluded(upper)),
        (_, None) => (Bound::Included(prefix.clone()), Bound::Excluded(upper)),
    };
    if range_is_empty(&lo, &hi) {
        return Box::new(std::iter::empty());
    }
    let skip = prefix.len();
    let range = tree.range::<Vec<u8>, _>((lo, hi));
    let keys: Box<dyn Iterator<Item = sled::Result<(IVec, IVec)>>> = match order {
        Order::Desc => Box::new(range.rev()),
        Order::Asc => Box::new(range),
    };
    Box::new(keys.map(move |item| {
        item.map(|(k, _)| k[skip..].to_vec())
            .map_err(|e| backend(what, e))
    }))
}

fn range_is_empty(lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> bool {
    match (lo, hi) {
        (Bound::Included(l), Bound::Excluded(h)) => l >= h,
        (Bound::Excluded(l), Bound::Excluded(h)) => l >= h,
        _ => false,
    }
}

/// `at` (8 bytes big-endian) then `id`.
pub(super) fn time_key(at: u64, id: &[u8]) -> Vec<u8> {
    [at.to_be_bytes().as_slice(), id].concat()
}

/// A [`time_key`] read back; a key too short to hold a time and an id is `Corrupt` in `tree`,
/// saying `short`.
pub(super) fn split_time_key<'k>(
    key: &'k [u8],
    tree: &'static str,
    short: &str,
) -> Result<(u64, &'k [u8]), StoreError> {
    match key.split_first_chunk::<8>() {
        Some((at, id)) if !id.is_empty() => Ok((u64::from_be_bytes(*at), id)),
        _ => Err(corrupt(tree, short)),
    }
}

/// Keeps an index in step with a record whose entry key went from `old` to `new` (none: the
/// record has no entry).
pub(super) fn move_entry(
    tree: &TransactionalTree,
    old: Option<Vec<u8>>,
    new: Option<Vec<u8>>,
) -> TxResult<()> {
    if old != new {
        if let Some(k) = old {
            tree.remove(k)?;
        }
        if let Some(k) = new {
            tree.insert(k, &[][..])?;
        }
    }
    Ok(())
}
