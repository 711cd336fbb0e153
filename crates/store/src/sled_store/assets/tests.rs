//! Asset libraries and assets through the `Store` trait, by area: the cases are built here and
//! tested in the modules below.

use crate::test_util::{TempDir, open_store};
use crate::{AssetRecord, AssetSource, AssetStatus, AssetType, Library, SledStore, Store};

use AssetStatus::{Active, Processing};

fn library(id: &str, owner: &str, family: &str) -> Library {
    Library {
        id: id.to_owned(),
        owner: owner.to_owned(),
        name: format!("{id} name"),
        family: family.to_owned(),
        created_at: 1,
        asset_count: 0,
    }
}

fn asset(id: &str, lib: &Library, status: AssetStatus, t: Option<AssetType>) -> AssetRecord {
    AssetRecord {
        id: id.to_owned(),
        owner: lib.owner.clone(),
        library_id: lib.id.clone(),
        family: lib.family.clone(),
        declared_type: t,
        asset_type: t,
        status,
        source: AssetSource::Url("https://example.com/a.png".into()),
        blob: None,
        format: None,
        bytes: None,
        width: None,
        height: None,
        created_at: 1,
        updated_at: 1,
        expires_at: None,
        error: None,
    }
}

/// A store with one library, `lib_1` of `key_a` in the family `gen2`.
fn with_library() -> (TempDir, SledStore, Library) {
    let (dir, store) = open_store();
    let lib = library("lib_1", "key_a", "gen2");
    store.create_library(&lib).unwrap();
    (dir, store, lib)
}

fn ids<T>(items: &[T], id: impl Fn(&T) -> &str) -> Vec<String> {
    items.iter().map(|x| id(x).to_owned()).collect()
}

fn asset_ids(items: &[AssetRecord]) -> Vec<String> {
    ids(items, |a| &a.id)
}

fn noop(_: &mut AssetRecord) {}

/// Moves an asset to active with an expiry.
fn activate(store: &SledStore, id: &str, expires_at: u64) -> AssetRecord {
    store
        .transition_asset(id, &[Processing], Active, &|a| {
            a.expires_at = Some(expires_at);
            a.format = Some("png".into());
        })
        .unwrap()
}

mod libraries;
mod listing;
mod status;
