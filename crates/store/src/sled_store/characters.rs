//! Characters on sled: the record under its id (`characters`), the owner index
//! (`characters_by_owner`: owner `\0` character id) and each owner's number of characters
//! (`character_counts`: owner -> 8 bytes big-endian; no entry is none). A creation reads the
//! number, writes the record, its index entry, the number plus one and the ledger entries of
//! its price in one transaction; a deletion takes all but the ledger back in one. sled's
//! transactions run one after another, so two creations never count the same number. The
//! caller flushes.
//!
//! A database written before the index and the numbers were kept has characters and no
//! numbers: opening it indexes and counts them once ([`index_earlier`]).

use std::collections::BTreeMap;

use sled::transaction::TransactionalTree;

use super::index::{children, pair_key, prefix};
use super::ledger::{apply, unix_secs};
use super::record::{backend, check_id, decode, encode, read};
use super::trees::{CHARACTERS, LedgerTx, SledStore};
use super::txn::{self, TxResult, abort, ensure_new, run};
use crate::{Character, LedgerDraft, Order, Page, StoreError};

/// Largest page of a listing.
const MAX_PAGE: usize = 100;

/// The number kept for `owner` (none: 0).
fn count(counts: &TransactionalTree, owner: &str) -> TxResult<u64> {
    Ok(counts
        .get(owner.as_bytes())?
        .and_then(|n| <[u8; 8]>::try_from(n.as_ref()).ok())
        .map_or(0, u64::from_be_bytes))
}

/// Keeps `n` as `owner`'s number; 0 leaves no entry.
fn set_count(counts: &TransactionalTree, owner: &str, n: u64) -> TxResult<()> {
    if n == 0 {
        counts.remove(owner.as_bytes())?;
    } else {
        counts.insert(owner.as_bytes(), &n.to_be_bytes()[..])?;
    }
    Ok(())
}

/// [`crate::Store::create_character`] without the flush.
pub(super) fn create(
    store: &SledStore,
    character: &Character,
    max_per_owner: u64,
    ledger: &[LedgerDraft],
) -> Result<(), StoreError> {
    check_id("character id", &character.id)?;
    check_id("character owner", &character.owner)?;
    let what = format!("create character {}", character.id);
    let bytes = encode(&what, character)?;
    let at = unix_secs();
    let t = &store.trees;
    run(
        &what,
        &(
            &store.characters,
            &store.characters_by_owner,
            &store.character_counts,
            &t.keys,
            &t.ledger,
            &t.ledger_by_task,
        ),
        |(characters, by_owner, counts, keys, ledger_tree, ledger_by_task)| {
            ensure_new(characters, "character", &character.id)?;
            let held = count(counts, &character.owner)?;
            if held >= max_per_owner {
                return abort(StoreError::CharacterLimit {
                    owner: character.owner.clone(),
                    max: max_per_owner,
                });
            }
            // Checked whole before anything is written: a refused entry writes nothing.
            let tx = LedgerTx {
                keys,
                ledger: ledger_tree,
                ledger_by_task,
            };
            apply(&tx, ledger, at)?;
            characters.insert(character.id.as_bytes(), bytes.as_slice())?;
            by_owner.insert(pair_key(&character.owner, &character.id), &[][..])?;
            set_count(counts, &character.owner, held + 1)
        },
    )
}

pub(super) fn get(store: &SledStore, id: &str) -> Result<Option<Character>, StoreError> {
    read(
        &store.characters,
        CHARACTERS,
        id.as_bytes(),
        &format!("read character {id}"),
    )
}

pub(super) fn list(
    store: &SledStore,
    owner: &str,
    after: Option<&str>,
    limit: usize,
    order: Order,
) -> Result<Page<Character>, StoreError> {
    let limit = limit.clamp(1, MAX_PAGE);
    let ids = children(
        &store.characters_by_owner,
        prefix(owner),
        after,
        order,
        "read character index",
    );
    let mut items = Vec::with_capacity(limit);
    let mut has_more = false;
    for id in ids {
        // A character deleted between the index read and this one is passed over.
        let Some(character) = get(store, &String::from_utf8_lossy(&id?))? else {
            continue;
        };
        if items.len() == limit {
            has_more = true;
            break;
        }
        items.push(character);
    }
    Ok(Page { items, has_more })
}

/// [`crate::Store::delete_character`] without the flush.
pub(super) fn delete(
    store: &SledStore,
    id: &str,
    owner: &str,
) -> Result<Option<Character>, StoreError> {
    run(
        &format!("delete character {id}"),
        &(
            &store.characters,
            &store.characters_by_owner,
            &store.character_counts,
        ),
        |(characters, by_owner, counts)| {
            let Some(character): Option<Character> =
                txn::get(characters, CHARACTERS, id.as_bytes())?
            else {
                return Ok(None);
            };
            if character.owner != owner {
                return Ok(None);
            }
            characters.remove(id.as_bytes())?;
            by_owner.remove(pair_key(owner, id))?;
            let held = count(counts, owner)?;
            set_count(counts, owner, held.saturating_sub(1))?;
            Ok(Some(character))
        },
    )
}

/// Indexes and counts the characters of a database written before the owner index and the
/// numbers were kept (characters there, no number at all), in one transaction. Returns how
/// many were indexed.
pub(super) fn index_earlier(store: &SledStore) -> Result<usize, StoreError> {
    if !store.character_counts.is_empty() || store.characters.is_empty() {
        return Ok(0);
    }
    let mut owners: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for item in store.characters.iter() {
        let (_, bytes) = item.map_err(|e| backend("read characters", e))?;
        let character: Character = decode(CHARACTERS, &bytes)?;
        owners
            .entry(character.owner)
            .or_default()
            .push(character.id);
    }
    run(
        "index characters",
        &(&store.characters_by_owner, &store.character_counts),
        |(by_owner, counts)| {
            for (owner, ids) in &owners {
                for id in ids {
                    by_owner.insert(pair_key(owner, id), &[][..])?;
                }
                set_count(counts, owner, ids.len() as u64)?;
            }
            Ok(())
        },
    )?;
    Ok(owners.values().map(Vec::len).sum())
}
