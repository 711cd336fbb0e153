//! Data-driven tests: one `check` per area, tables of inputs and expectations.

mod batches;
mod openai;
mod sim;
mod support;
mod usage;
mod validate;
