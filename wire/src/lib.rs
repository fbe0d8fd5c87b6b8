//! placeholder until the wire helper lands
