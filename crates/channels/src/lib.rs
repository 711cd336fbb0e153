//! Upstream channels: what the engine asks of them ([`VideoChannel`]) and the kinds there are.
//! Today that is the built-in simulator, which renders real H.264 videos in process.
#![forbid(unsafe_code)]

pub mod mp4probe;
pub mod sim;
mod sim_directives;
mod simulator;
mod video;

pub use sim_directives::SimDirectives;
pub use simulator::{Simulator, SimulatorSettings};
pub use video::{PollOutcome, ResultFiles, ResultSource, SubmitOutcome, VideoChannel, VideoJob};
