//! Upstream channels: what the engine asks of them ([`VideoChannel`]) and the kinds there are.
//! Today that is the built-in simulator, which renders real H.264 videos in process.
#![forbid(unsafe_code)]

pub mod chat;
pub mod mp4probe;
pub mod sim;
mod sim_directives;
mod simulator;
pub mod upstream_http;
mod video;

pub use chat::{
    ChatAnswer, ChatCall, ChatChannel, ChatEventStream, ChatSettings, FailureKind, StreamFailure,
    UpstreamFailure,
};
pub use sim_directives::SimDirectives;
pub use simulator::{Simulator, SimulatorSettings};
pub use upstream_http::{
    UpstreamBody, UpstreamError, UpstreamHttp, UpstreamResponse, UpstreamTimeouts,
};
pub use video::{PollOutcome, ResultFiles, ResultSource, SubmitOutcome, VideoChannel, VideoJob};
