//! The relay's integration tests: the real server (in process, or the built binary) on port
//! 0, spoken to over HTTP; media and upstreams stood in for by small local servers.

mod admin;
mod billing;
mod errors;
mod harness;
mod limits;
mod restart;
mod videos;
