//! What operators use: the admin API ([`admin`]), the counters `GET /metrics` reports
//! ([`metrics`]), the web console ([`console`]) and the webhook sender ([`webhooks`]).

pub mod admin;
pub mod console;
pub mod metrics;
pub mod webhooks;
