//! Connection limits: how many connections the relay holds open, in all and per client address,
//! and what a connection past them gets.
//!
//! Every open connection costs a file descriptor, and so does every stored file being read or
//! written and every upstream connection. Were the relay to accept until the process runs out of
//! descriptors, one client holding connections open would make every `accept`, store write and
//! blob read fail. So the gate admits at most `max_connections` (by default half of what the
//! descriptor limit leaves after a reserve, since a connection may hold a file or an upstream
//! connection besides its socket), and at most `max_connections_per_client` from one address.
//! A connection past either is answered `503 unavailable` with `Connection: close` and closed at
//! once; the connections already open are served as before.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use error_codes::{ApiError, ErrorCode};

use crate::config::ServerConfig;

/// Descriptors kept out of the connection budget for the store, logs and the like.
const RESERVE: u64 = 256;

/// The descriptor limit assumed where it cannot be read.
const FALLBACK_NOFILE: u64 = 1024;

/// The connection budget of one server.
#[derive(Debug)]
pub struct Gate {
    max: usize,
    per_client: usize,
    open: AtomicUsize,
    by_client: Mutex<HashMap<IpAddr, usize>>,
    refusal: Vec<u8>,
}

/// Why a connection was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// `max_connections` are open.
    Full,
    /// `max_connections_per_client` are open from this address.
    ClientFull,
}

/// An admitted connection's place in the budget, given back when dropped.
#[derive(Debug)]
pub struct Slot {
    gate: Arc<Gate>,
    client: Option<IpAddr>,
}

impl Gate {
    /// The budget for `config`, with the process's descriptor limit raised to its hard limit
    /// first (where the system allows).
    pub fn new(config: &ServerConfig) -> Gate {
        let nofile = raise_nofile_limit();
        let budget = nofile.saturating_sub(RESERVE).max(1);
        let max = match u64::from(config.max_connections) {
            0 => (budget / 2).max(1),
            n => n.min(budget),
        };
        if config.max_connections != 0 && u64::from(config.max_connections) > budget {
            tracing::warn!(
                "server.max_connections = {} is more than the descriptor limit ({nofile}) \
                 allows; using {max}",
                config.max_connections
            );
        }
        let max = usize::try_from(max).unwrap_or(usize::MAX);
        Gate::with_caps(max, config.max_connections_per_client as usize)
    }

    /// A budget of `max` connections, `per_client` from one address (0: no cap).
    pub fn with_caps(max: usize, per_client: usize) -> Gate {
        Gate {
            max,
            per_client,
            open: AtomicUsize::new(0),
            by_client: Mutex::new(HashMap::new()),
            refusal: refusal_answer(),
        }
    }

    /// Connections admitted in all.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Connections admitted from one address (0: no cap).
    pub fn per_client(&self) -> usize {
        self.per_client
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// Admits a connection from `client`, or says why not.
    pub fn admit(self: &Arc<Self>, client: IpAddr) -> Result<Slot, Refused> {
        if self
            .open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max).then_some(n + 1)
            })
            .is_err()
        {
            return Err(Refused::Full);
        }
        if self.per_client == 0 {
            return Ok(Slot {
                gate: Arc::clone(self),
                client: None,
            });
        }
        let mut by_client = self
            .by_client
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let count = by_client.entry(client).or_insert(0);
        if *count >= self.per_client {
            drop(by_client);
            self.open.fetch_sub(1, Ordering::AcqRel);
            return Err(Refused::ClientFull);
        }
        *count += 1;
        Ok(Slot {
            gate: Arc::clone(self),
            client: Some(client),
        })
    }

    /// The whole answer a refused connection gets: `503 unavailable`, `Connection: close`.
    pub fn refusal(&self) -> &[u8] {
        &self.refusal
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(client) = self.client {
            let mut by_client = self
                .gate
                .by_client
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if let Entry::Occupied(mut entry) = by_client.entry(client) {
                *entry.get_mut() -= 1;
                if *entry.get() == 0 {
                    entry.remove();
                }
            }
        }
        self.gate.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Raises the soft limit of open files to the hard limit and answers the soft limit in force.
fn raise_nofile_limit() -> u64 {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(n) => n,
        Err(e) => {
            tracing::warn!("reading the open file limit: {e}; assuming {FALLBACK_NOFILE}");
            FALLBACK_NOFILE
        }
    }
}

/// The bytes of the refusal: an HTTP/1.1 answer in the error shape of CONTRACT §0.1.
fn refusal_answer() -> Vec<u8> {
    let err = ApiError::new(
        ErrorCode::Unavailable,
        "the relay holds as many connections as it allows (from this address or in all); \
         retry after closing idle ones",
    );
    let body = err.openai_body().to_string();
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nretry-after: 1\r\nretry-after-ms: 1000\r\n\
         connection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_in_all_and_per_client_and_slots_come_back() {
        let gate = Arc::new(Gate::with_caps(3, 2));
        let a: IpAddr = [127, 0, 0, 2].into();
        let b: IpAddr = [127, 0, 0, 3].into();
        let a1 = gate.admit(a).unwrap();
        let _a2 = gate.admit(a).unwrap();
        assert_eq!(gate.admit(a).unwrap_err(), Refused::ClientFull);
        let _b1 = gate.admit(b).unwrap();
        assert_eq!(gate.admit(b).unwrap_err(), Refused::Full);
        assert_eq!(gate.open(), 3);
        drop(a1);
        assert_eq!(gate.open(), 2);
        let _a3 = gate.admit(a).unwrap();
        assert_eq!(gate.admit(a).unwrap_err(), Refused::Full);
    }

    #[test]
    fn no_per_client_cap_when_zero() {
        let gate = Arc::new(Gate::with_caps(2, 0));
        let a: IpAddr = [127, 0, 0, 2].into();
        let _s = [gate.admit(a).unwrap(), gate.admit(a).unwrap()];
        assert_eq!(gate.admit(a).unwrap_err(), Refused::Full);
    }

    #[test]
    fn the_refusal_is_a_whole_http_answer() {
        let gate = Gate::with_caps(1, 1);
        let text = String::from_utf8(gate.refusal().to_vec()).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 503 "), "{head}");
        assert!(head.contains("connection: close"));
        assert!(head.contains(&format!("content-length: {}", body.len())));
        let json: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(json["error"]["message"], "unavailable");
    }
}
