//! The built-in simulator: the channel itself ([`simulator`]), the `x-relay-sim` directives that
//! steer it ([`directives`]), and the pieces that talk to no one: the video renderer.

pub(crate) mod directives;
mod font;
mod mp4write;
mod pattern;
pub mod picture;
pub mod render;
pub(crate) mod simulator;
mod yuv;

pub use mp4write::MuxError;
