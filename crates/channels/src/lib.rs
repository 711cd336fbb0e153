//! Upstream channels: what the engine asks of them ([`VideoChannel`]) and the kinds there are.
//! The built-in simulator renders real H.264 videos in process; `openai-videos` and `ark`
//! speak to real upstreams over HTTP.
#![forbid(unsafe_code)]

pub mod ark;
pub mod chat;
mod deadline;
mod job;
pub mod mp4probe;
pub mod openai_videos;
pub mod remote;
pub mod sim;
mod sim_directives;
mod simulator;
mod together;
pub mod upstream_http;
mod upstream_pool;
mod video;

pub use chat::{
    ChatAnswer, ChatCall, ChatChannel, ChatEventStream, ChatSettings, FailureKind, StreamFailure,
    UpstreamFailure,
};
pub use deadline::Deadline;
pub use job::{
    PollOutcome, ReferenceRole, ResultFiles, ResultSource, StoredReference, SubmitOutcome, VideoJob,
};
pub use remote::{RemoteSettings, ResultUrls, path_part};
pub use sim_directives::SimDirectives;
pub use simulator::{Simulator, SimulatorSettings};
pub use together::together;
pub use upstream_http::{
    UpstreamBody, UpstreamError, UpstreamHttp, UpstreamResponse, UpstreamTimeouts,
};
pub use video::VideoChannel;
