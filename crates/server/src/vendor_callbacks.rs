//! What upstream vendors call back: each vendor's inbound callback about a task, checked as
//! coming from that vendor's task before it moves the task on ([`common`]: the token, the
//! bounded body, bringing the poll forward). Polling stays the safety net.

pub mod ark;
pub mod common;
pub mod kling;
pub mod minimax;
pub mod vidu;
