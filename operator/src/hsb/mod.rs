//! The HSB host client: configures a peer over ECB exactly as a Holoscan Sensor Bridge host
//! configures its FPGA, drives its traffic player and reads its capture RAM back.
//!
//! It speaks only ECB (UDP 8192) and knows only the register map of PROTOCOLS.md 2 and
//! `rocelink_wire::hsb`: nothing about `fpga-sim`'s internals, so the same client drives a
//! real FPGA at an IP address. rocelink's extension registers (closed loop, counters, QEC
//! replay) are optional: a peer that answers them with "invalid address" still works.

pub mod ecb_client;
pub mod host;

pub use ecb_client::{EcbClient, EcbError};
pub use host::{DataPlaneConfig, DecoderTime, HsbHost, PeerStats, PlayerConfig, QecCounters, QecInfo, QecPlayerConfig};
