//! The encoding of one chunk of the usage log: the charge entries of one batch.
//!
//! A chunk is written as a compact binary record: the tag byte [`BINARY`], the entry count
//! (u32), then per entry the id's ULID (16 bytes; the id is `led_` and the ULID), the key id
//! and the charge id (each a u32 length and UTF-8 bytes), the amount (i64), the balance after
//! it (a flag byte, then an i64 when there is one) and the time (u64, Unix seconds); integers
//! little-endian. Every entry is a `charge`. Chunks written as JSON (an array of ledger
//! entries, so starting with `[`) by earlier versions are read as they are.

use ulid::Ulid;

use super::record::{corrupt, decode as decode_json};
use super::trees::USAGE;
use crate::{LedgerEntry, LedgerKind, StoreError};

/// The first byte of a binary chunk.
const BINARY: u8 = 1;

/// A charge entry as written: borrowed from the batch, its id a bare ULID.
pub(super) struct Charged<'a> {
    pub id: Ulid,
    pub key_id: &'a str,
    pub task_id: &'a str,
    pub amount: i64,
    pub balance_after: Option<i64>,
    pub at: u64,
}

/// The chunk of `entries`.
pub(super) fn encode(entries: &[Charged<'_>]) -> Result<Vec<u8>, StoreError> {
    let size: usize = entries
        .iter()
        .map(|e| 16 + 8 + e.key_id.len() + e.task_id.len() + 8 + 9 + 8)
        .sum();
    let mut out = Vec::with_capacity(5 + size);
    out.push(BINARY);
    out.extend_from_slice(&len32(entries.len())?.to_le_bytes());
    for e in entries {
        out.extend_from_slice(&u128::from(e.id).to_le_bytes());
        for text in [e.key_id, e.task_id] {
            out.extend_from_slice(&len32(text.len())?.to_le_bytes());
            out.extend_from_slice(text.as_bytes());
        }
        out.extend_from_slice(&e.amount.to_le_bytes());
        match e.balance_after {
            Some(balance) => {
                out.push(1);
                out.extend_from_slice(&balance.to_le_bytes());
            }
            None => out.push(0),
        }
        out.extend_from_slice(&e.at.to_le_bytes());
    }
    Ok(out)
}

fn len32(len: usize) -> Result<u32, StoreError> {
    u32::try_from(len)
        .map_err(|_| StoreError::Backend(format!("usage chunk: a length of {len} is too long")))
}

/// The entries of a chunk, binary or JSON.
pub(super) fn decode(bytes: &[u8]) -> Result<Vec<LedgerEntry>, StoreError> {
    match bytes.first() {
        Some(&BINARY) => Reader(&bytes[1..]).chunk(),
        _ => decode_json(USAGE, bytes),
    }
}

/// The unread rest of a binary chunk.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], StoreError> {
        let (head, rest) = self
            .0
            .split_first_chunk::<N>()
            .ok_or_else(|| corrupt(USAGE, "a binary chunk ends early"))?;
        self.0 = rest;
        Ok(*head)
    }

    fn text(&mut self) -> Result<String, StoreError> {
        let len = u32::from_le_bytes(self.take()?) as usize;
        if self.0.len() < len {
            return Err(corrupt(USAGE, "a binary chunk ends early"));
        }
        let (text, rest) = self.0.split_at(len);
        self.0 = rest;
        String::from_utf8(text.to_vec())
            .map_err(|_| corrupt(USAGE, "a binary chunk has an id that is not UTF-8"))
    }

    fn chunk(mut self) -> Result<Vec<LedgerEntry>, StoreError> {
        let count = u32::from_le_bytes(self.take()?) as usize;
        // Each entry takes at least 45 bytes: a count beyond that is not believed.
        let mut entries = Vec::with_capacity(count.min(self.0.len() / 45));
        for _ in 0..count {
            let id = Ulid(u128::from_le_bytes(self.take()?));
            let key_id = self.text()?;
            let task_id = self.text()?;
            let amount = i64::from_le_bytes(self.take()?);
            let balance_after = match self.take::<1>()? {
                [0] => None,
                [1] => Some(i64::from_le_bytes(self.take()?)),
                _ => return Err(corrupt(USAGE, "a binary chunk has a bad balance flag")),
            };
            let at = u64::from_le_bytes(self.take()?);
            entries.push(LedgerEntry {
                id: format!("led_{id}"),
                key_id,
                task_id,
                kind: LedgerKind::Charge,
                amount,
                balance_after,
                at,
            });
        }
        if !self.0.is_empty() {
            return Err(corrupt(USAGE, "a binary chunk has bytes past its entries"));
        }
        Ok(entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn charged(id: u128, key_id: &'static str, balance_after: Option<i64>) -> Charged<'static> {
        Charged {
            id: Ulid(id),
            key_id,
            task_id: "msg_01",
            amount: -7,
            balance_after,
            at: 1_700_000_000,
        }
    }

    #[test]
    fn binary_chunks_read_back_as_the_entries_written() {
        let written = [
            charged(1, "key_a", Some(93)),
            charged(u128::MAX, "key_ü", None),
        ];
        let bytes = encode(&written).expect("encoded");
        let read = decode(&bytes).expect("decoded");
        assert_eq!(read.len(), 2);
        for (entry, charged) in read.iter().zip(&written) {
            assert_eq!(entry.id, format!("led_{}", charged.id));
            assert_eq!(entry.key_id, charged.key_id);
            assert_eq!(entry.task_id, "msg_01");
            assert_eq!(entry.kind, LedgerKind::Charge);
            assert_eq!((entry.amount, entry.at), (-7, 1_700_000_000));
            assert_eq!(entry.balance_after, charged.balance_after);
        }
        assert_eq!(decode(&encode(&[]).expect("encoded")).expect("decoded"), []);
    }

    #[test]
    fn json_chunks_of_earlier_versions_are_read_as_they_are() {
        let entry = LedgerEntry {
            id: "led_old".into(),
            key_id: "key_a".into(),
            task_id: "msg_01".into(),
            kind: LedgerKind::Charge,
            amount: -3,
            balance_after: None,
            at: 5,
        };
        let bytes = serde_json::to_vec(&[&entry]).expect("json");
        assert_eq!(decode(&bytes).expect("decoded"), [entry]);
    }

    #[test]
    fn damaged_binary_chunks_are_corrupt_not_a_panic() {
        let bytes = encode(&[charged(1, "key_a", Some(1))]).expect("encoded");
        for cut in 1..bytes.len() {
            assert!(
                matches!(
                    decode(&bytes[..cut]),
                    Err(StoreError::Corrupt { tree: USAGE, .. })
                ),
                "cut at {cut}"
            );
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode(&longer).is_err());
        let mut flag = bytes;
        flag[1 + 4 + 16 + 4 + 5 + 4 + 6 + 8] = 7;
        assert!(decode(&flag).is_err());
    }
}
