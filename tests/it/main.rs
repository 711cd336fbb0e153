//! The relay's integration tests: the real server (in process, or the built binary) on port
//! 0, spoken to over HTTP; media and upstreams stood in for by small local servers.

mod admin;
mod assets;
mod batches;
mod billing;
mod blobs;
mod cli;
mod cluster;
mod errors;
mod fake_chat;
mod fake_kling;
mod fake_minimax;
mod fake_vendor;
mod fake_veo;
mod fake_video;
mod fake_wan;
mod generations;
mod hardening;
mod harness;
mod idempotency;
mod kling;
mod limits;
mod messages;
mod metrics;
mod minimax;
mod moto;
mod references;
mod restart;
mod upstreams;
mod vendor_flows;
mod veo;
mod video_derived;
mod video_models;
mod videos;
mod wan;
mod webhooks;
