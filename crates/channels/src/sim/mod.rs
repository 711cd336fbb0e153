//! The built-in simulator's pieces that do not talk to anyone: the video renderer.

mod font;
mod mp4write;
mod pattern;
pub mod picture;
pub mod render;
mod yuv;

pub use mp4write::MuxError;
