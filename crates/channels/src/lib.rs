//! Upstream channels: what the engine asks of them ([`VideoChannel`]) and the kinds there are.
//!
//! - [`video`](VideoChannel): what the engine asks of every video channel, the job and answers
//!   it speaks in, and what each vendor model can make ([`ModelCaps`]) fitted to a request;
//! - [`vendors`]: the [`Vendor`](vendors::Vendor) seam, one module per upstream video vendor
//!   kind and their registry, and what they share (settings, the key header, classification
//!   of answers, references, result downloads, channel tests);
//! - [`sim`]: the built-in simulator, which renders real H.264 videos in process;
//! - [`chat`]: the chat upstreams (`anthropic`, `openai-chat`, the simulator) and streams;
//! - [`http`]: the upstream HTTP client every HTTP channel shares, its connection pool and
//!   HTTP/1.1 reader, and the timers of its waits;
//! - [`check`]: channel tests of every kind, bounded in time ([`ChannelTest`]);
//! - [`mp4probe`]: reading an MP4's boxes, for checking stored videos.
#![forbid(unsafe_code)]

pub mod chat;
pub mod check;
pub mod http;
pub mod mp4probe;
pub mod sim;
pub mod vendors;
pub mod video;

/// What the fuzz targets in `fuzz/` drive that is not public otherwise: the HTTP/1.1 reader of
/// upstream answers over bytes in memory. Not part of the crate's interface.
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::http::pool::h1::fuzzing::{Answer, AnswerFraming, read_answer};
}

pub use chat::{
    ChatAnswer, ChatCall, ChatChannel, ChatEventStream, ChatSettings, FailureKind, StreamFailure,
    UpstreamFailure,
};
pub use check::{ChannelTest, NoBlobs};
pub use http::client::{
    UpstreamBody, UpstreamError, UpstreamHttp, UpstreamResponse, UpstreamTimeouts,
};
pub use http::deadline::Deadline;
pub use http::network::{Network, NetworkError, NetworkSettings, ProxyChoice, Roots};
pub use http::together::together;
pub use sim::directives::SimDirectives;
pub use sim::simulator::{Simulator, SimulatorSettings};
pub use vendors::common::{RemoteSettings, ResultUrls, path_part};
pub use vendors::{CallbackSettings, KindSettings, Need, VendorSettings};
pub use video::caps::{Demand, DemandField, Fit, ModelCaps, Offer, Refusal, fit_any};
pub use video::job::{
    ChannelCheck, CheckVerdict, PollOutcome, ReferenceRole, ResultFiles, ResultSource,
    StoredReference, SubmitOutcome, VendorUsage, VideoJob,
};
pub use video::{VendorChannel, VideoChannel};
