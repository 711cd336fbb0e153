//! What operators use: the admin API ([`admin`]), channel tests ([`channel_test`]), the
//! counters `GET /metrics` reports ([`metrics`]), the web console ([`console`]) and the webhook
//! sender ([`webhooks`]).

pub mod admin;
pub mod channel_test;
pub mod console;
pub mod metrics;
pub mod webhooks;
