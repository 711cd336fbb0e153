//! 128-bit fingerprints of names under a random SipHash-1-3 key of this process (one pass
//! with a 128-bit output), and the maps keyed by them. A keyed function no one outside can
//! compute: no one can make two names share a fingerprint on purpose, and two distinct names
//! share one by chance with probability 2^-128. The fingerprint is already a uniform random
//! number, so the maps use its low bits as their hash instead of hashing it again.

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};

use rand::RngCore;
use siphasher::sip128::{Hasher128, SipHasher13};

/// The key of this process.
#[derive(Debug)]
pub struct Prints(u64, u64);

impl Default for Prints {
    fn default() -> Prints {
        let mut rng = rand::rng();
        Prints(rng.next_u64(), rng.next_u64())
    }
}

impl Prints {
    /// The fingerprint of `name`.
    pub fn of(&self, name: impl Hash) -> u128 {
        let mut hasher = SipHasher13::new_with_keys(self.0, self.1);
        name.hash(&mut hasher);
        hasher.finish128().into()
    }

    /// `of((key_id, None::<&str>))`, the name of a key's own bucket: a request takes from it
    /// and its answer reports it, so each thread keeps the last it made (with the key it was
    /// made under) rather than making it twice a request.
    pub fn of_key_bucket(&self, key_id: &str) -> u128 {
        thread_local! {
            static LAST: RefCell<Option<LastPrint>> = const { RefCell::new(None) };
        }
        LAST.with_borrow_mut(|last| {
            if let Some((keys, id, print)) = last.as_ref()
                && *keys == (self.0, self.1)
                && id == key_id
            {
                return *print;
            }
            let print = self.of((key_id, None::<&str>));
            match last {
                Some((keys, id, at)) => {
                    *keys = (self.0, self.1);
                    id.clear();
                    id.push_str(key_id);
                    *at = print;
                }
                None => *last = Some(((self.0, self.1), key_id.to_owned(), print)),
            }
            print
        })
    }
}

/// The process key, the key id and the fingerprint [`Prints::of_key_bucket`] made last.
type LastPrint = ((u64, u64), String, u128);

/// A map keyed by fingerprints.
pub type ByPrint<V> = HashMap<u128, V, BuildHasherDefault<PrintHasher>>;

/// Takes a fingerprint's low 64 bits as its hash (for the keys of [`ByPrint`] only).
#[derive(Debug, Default)]
pub struct PrintHasher(u64);

impl Hasher for PrintHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Not reached for u128 keys; folds anything else in all the same.
        for chunk in bytes.chunks(8) {
            let mut word = [0; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.0 = self.0.rotate_left(29) ^ u64::from_le_bytes(word);
        }
    }

    fn write_u128(&mut self, print: u128) {
        self.0 = print as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_differ_by_name_and_key_maps_by_them() {
        let prints = Prints::default();
        assert_eq!(prints.of("a"), prints.of("a"));
        assert_ne!(prints.of("a"), prints.of("b"));
        assert_ne!(prints.of(("k", None::<&str>)), prints.of(("k", Some("t"))));
        assert_ne!(Prints::default().of("a"), prints.of("a"));
        let mut map = ByPrint::default();
        for name in ["a", "b", "c"] {
            map.insert(prints.of(name), name);
        }
        assert_eq!(map.get(&prints.of("b")), Some(&"b"));
        assert_eq!(map.len(), 3);
        // A key's bucket is named alike however its name is made, under each process key.
        let other = Prints::default();
        for (p, q) in [(&prints, &other), (&other, &prints)] {
            assert_eq!(p.of_key_bucket("k"), p.of(("k", None::<&str>)));
            assert_eq!(p.of_key_bucket("k"), p.of(("k", None::<&str>)));
            assert_eq!(p.of_key_bucket("j"), p.of(("j", None::<&str>)));
            assert_ne!(q.of_key_bucket("j"), p.of(("j", None::<&str>)));
        }
    }
}
