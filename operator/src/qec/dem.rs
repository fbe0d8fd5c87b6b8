//! The stim detector error model loader: `rocelink_wire::dem` (module docs there), shared
//! with fpga-sim's syndrome replay so that the peer and the decoder read one file the same
//! way.

pub use rocelink_wire::dem::*;
