//! Serving connections: the accept loop ([`accept`]), the threads that serve connections
//! ([`workers`]) and what they run beside their requests: a coarse timer for connection
//! deadlines ([`coarse_timer`]), a short spin before a thread sleeps ([`spin`]), and the caps on
//! open connections ([`conns`]).

mod accept;
pub mod coarse_timer;
pub mod conns;
pub mod spin;
mod workers;

pub use accept::serve;
