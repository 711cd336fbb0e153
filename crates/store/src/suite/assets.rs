//! Asset libraries and assets, by area.

mod libraries;
mod listing;
mod status;
