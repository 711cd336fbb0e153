//! Upstream channels: what the engine asks of them ([`VideoChannel`]) and the kinds there are.
//!
//! - [`video`](VideoChannel): the seam every video channel stands behind, and the job and
//!   answers it speaks in;
//! - [`vendors`]: one module per upstream video vendor kind (`openai-videos`, `ark`) and what
//!   they share (settings, classification of answers, references, result URLs);
//! - [`sim`]: the built-in simulator, which renders real H.264 videos in process;
//! - [`chat`]: the chat upstreams (`anthropic`, `openai-chat`, the simulator) and streams;
//! - [`http`]: the upstream HTTP client every HTTP channel shares, its connection pool and
//!   HTTP/1.1 reader, and the timers of its waits;
//! - [`mp4probe`]: reading an MP4's boxes, for checking stored videos.
#![forbid(unsafe_code)]

pub mod chat;
pub mod http;
pub mod mp4probe;
pub mod sim;
pub mod vendors;
mod video;

pub use chat::{
    ChatAnswer, ChatCall, ChatChannel, ChatEventStream, ChatSettings, FailureKind, StreamFailure,
    UpstreamFailure,
};
pub use http::client::{
    UpstreamBody, UpstreamError, UpstreamHttp, UpstreamResponse, UpstreamTimeouts,
};
pub use http::deadline::Deadline;
pub use http::network::{Network, NetworkError, NetworkSettings, ProxyChoice, Roots};
pub use http::together::together;
pub use sim::directives::SimDirectives;
pub use sim::simulator::{Simulator, SimulatorSettings};
pub use vendors::common::{RemoteSettings, ResultUrls, path_part};
pub use video::VideoChannel;
pub use video::job::{
    PollOutcome, ReferenceRole, ResultFiles, ResultSource, StoredReference, SubmitOutcome, VideoJob,
};
