//! One place for sled transactions: running a step as one transaction over a set of trees,
//! its outcome as the store's (the step's own abort as it is, sled's failure as
//! [`StoreError::Backend`]), and the reads and writes of records inside one.

use serde::Serialize;
use serde::de::DeserializeOwned;
use sled::transaction::{
    ConflictableTransactionError, TransactionError, Transactional, TransactionalTree,
};

use super::record::{backend, decode, encode};
use crate::StoreError;

pub(super) type TxResult<T> = Result<T, ConflictableTransactionError<StoreError>>;

/// Ends the transaction with `e`, writing nothing.
pub(super) fn abort<T>(e: StoreError) -> TxResult<T> {
    Err(ConflictableTransactionError::Abort(e))
}

/// A store result inside a transaction: its error aborts the transaction.
pub(super) fn or_abort<T>(result: Result<T, StoreError>) -> TxResult<T> {
    result.map_err(ConflictableTransactionError::Abort)
}

/// Runs `step` as one transaction over `trees`; `what` names the step in a storage error.
pub(super) fn run<T, A>(
    what: &str,
    trees: &T,
    step: impl Fn(&T::View) -> TxResult<A>,
) -> Result<A, StoreError>
where
    T: Transactional<StoreError>,
{
    match trees.transaction(step) {
        Ok(a) => Ok(a),
        Err(TransactionError::Abort(e)) => Err(e),
        Err(TransactionError::Storage(e)) => Err(backend(what, e)),
    }
}

/// The record under `id` in `tree` (whose name is `name`), if any.
pub(super) fn get<T: DeserializeOwned>(
    tree: &TransactionalTree,
    name: &'static str,
    id: &[u8],
) -> TxResult<Option<T>> {
    match tree.get(id)? {
        Some(bytes) => or_abort(decode(name, &bytes)).map(Some),
        None => Ok(None),
    }
}

/// Writes `value` (a `what`) under `id` in `tree`.
pub(super) fn put<T: Serialize>(
    tree: &TransactionalTree,
    id: &[u8],
    what: &str,
    value: &T,
) -> TxResult<()> {
    let bytes = or_abort(encode(what, value))?;
    tree.insert(id, bytes)?;
    Ok(())
}

/// Aborts when `tree` holds `id` already (a `what`).
pub(super) fn ensure_new(tree: &TransactionalTree, what: &str, id: &str) -> TxResult<()> {
    if tree.get(id.as_bytes())?.is_some() {
        return abort(StoreError::Backend(format!("{what} {id} already exists")));
    }
    Ok(())
}

/// Declares a set of trees that steps run transactions over: `$trees` holds each one as a
/// [`sled::Tree`] and opens them all by name (`open`); `$tx` holds each one as a
/// `&TransactionalTree`, and `$trees::tx(what, step)` runs `step` on a `$tx` as one
/// transaction over all of them.
macro_rules! tree_set {
    (
        $(#[$meta:meta])*
        $vis:vis struct $trees:ident / $tx:ident {
            $($field:ident: $name:expr),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone)]
        $vis struct $trees {
            $($vis $field: ::sled::Tree,)+
        }

        #[doc = concat!("The transactional views of the trees of a [`", stringify!($trees), "`].")]
        $vis struct $tx<'a> {
            $($vis $field: &'a ::sled::transaction::TransactionalTree,)+
        }

        impl $trees {
            $vis fn open(db: &::sled::Db) -> Result<$trees, $crate::StoreError> {
                use $crate::sled_store::record::open_tree;
                Ok($trees {
                    $($field: open_tree(db, $name)?,)+
                })
            }

            /// Runs `step` as one transaction over every tree of the set; `what` names the step
            /// in a storage error.
            $vis fn tx<A>(
                &self,
                what: &str,
                step: impl Fn(&$tx<'_>) -> $crate::sled_store::txn::TxResult<A>,
            ) -> Result<A, $crate::StoreError> {
                $crate::sled_store::txn::run(
                    what,
                    &($(&self.$field,)+),
                    |($($field,)+)| step(&$tx { $($field,)+ }),
                )
            }
        }
    };
}
pub(super) use tree_set;
