//! `POST /v1/video/generations`: validation of the request (CONTRACT §2.3), the checks of the
//! referenced assets, and the choice of an adaptive ratio.
//!
//! Check order (SPEC §7, CONTRACT §2.3), first failure wins:
//!
//! 1. [`validate`], pure: the body is a JSON object (`invalid request`); `model` is in the
//!    catalog (`invalid model`); the model's family is the key's (`group mismatch`);
//!    `resolution` (`invalid resolution`), `duration` (`invalid duration`), `ratio`
//!    (`invalid ratio`) each against the model, joint rules included; the `assets` list (its
//!    shape is `invalid request`, too many of one role `reference limit exceeded`); `prompt`
//!    (`invalid prompt`); `return_last_frame` and `seed` (`invalid request`).
//! 2. [`check_assets`], over facts the server looked up: every asset exists for the caller
//!    (`asset not found`), then every asset is `active` (`asset not active`), then every asset is
//!    of the model's family (`asset family mismatch`), then every asset is of the type its role
//!    takes (`invalid image` / `invalid video` / `invalid audio`).
//! 3. The body-size `413` is the server's, last.
//!
//! Rules decided here:
//! - A JSON `null` is the same as leaving the field out; unknown fields are ignored.
//! - `duration`: a JSON integer, a number with a zero fraction (`5.0`), or a string holding
//!   either (`"5"`).
//! - A field left out takes the model's first listed value; for `duration`, the first listed
//!   value the joint rules allow at the chosen resolution.
//! - `seed`: an integer from 0 to 4294967295; `-1` means "choose one" (the same as leaving it
//!   out).
//! - The same asset may be referenced under several roles.

mod asset_checks;
mod detail;
mod ratio;
mod reference;
mod validate;

pub use asset_checks::{AssetFact, check_assets};
pub use ratio::resolve_ratio;
pub use reference::{AssetRef, AssetState, MediaType, Role};
pub use validate::{MAX_PROMPT_CHARS, MAX_SEED, ValidGeneration, validate};
