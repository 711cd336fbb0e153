//! What every HTTP channel shares: the upstream client ([`client`]: http and https, HTTP/1.1
//! and HTTP/2, timeouts), how it reaches upstreams ([`network`]: TLS roots, a CA file, a
//! proxy), its pool of connections per thread and origin with our own HTTP/1.1 reader and
//! writer ([`pool`]), the one timer of repeated waits ([`deadline`]) and the writes of one turn
//! of a runtime sent together ([`together`]).

pub mod client;
pub(crate) mod deadline;
pub mod network;
pub(crate) mod pool;
#[cfg(test)]
pub(crate) mod test_tls;
pub(crate) mod together;
