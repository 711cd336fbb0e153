//! What upstream vendors call back: each vendor's inbound callback about a task, checked as
//! coming from that vendor's task before it moves the task on. Polling stays the safety net.

pub mod ark;
