//! The built-in simulator's pieces that do not talk to anyone: the video renderer.

mod font;
mod mp4write;
pub mod picture;
pub mod render;

pub use mp4write::MuxError;
