//! rocelink-wire: byte-exact, panic-free views and Reprs for the protocols rocelink speaks.
//!
//! Guarantees, for every module:
//! - no `unsafe`, no I/O, no allocation in any parse or emit path;
//! - no panic on any input: views read with checked slicing, so even a view made with
//!   `new_unchecked` over a short buffer reads zeros instead of panicking;
//! - every parse error is a small `Copy` [`Error`], so a receive path can count drops;
//! - protocol enums are total (`Unknown(u8)`): every byte parses and re-emits unchanged;
//! - `parse` then `emit` reproduces the input bytes for every header rocelink emits
//!   (reserved bits included), and `emit` then `parse` gives the same Repr.
//!
//! Layout: one module per protocol, smoltcp style (`Packet<T: AsRef<[u8]>>` views with
//! private `mod field` ranges, a `*Repr` with `parse`/`emit`/`buffer_len`).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod aeth;
pub mod bth;
mod bytes;
pub mod dem;
pub mod ecb;
pub mod error;
pub mod ethernet;
pub mod hsb;
pub mod icrc;
pub mod immdt;
pub mod ipv4;
pub mod qec;
pub mod reth;
pub mod roce;
pub mod rpc;
pub mod udp;

pub use error::{Error, Result};
