//! The one error type of the crate: small, `Copy`, allocation-free, so a receive path can
//! count errors per packet without paying for them (STYLE.md lesson 2).

use core::fmt;

/// Why a buffer could not be parsed or emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Error {
    /// The buffer is shorter than the headers or the length fields say.
    Truncated,
    /// A field holds a value the protocol forbids (bad IHL, bad pad count, inconsistent lengths).
    Malformed,
    /// The IPv4 header checksum is wrong.
    BadChecksum,
    /// The RoCEv2 invariant CRC is wrong.
    BadIcrc,
    /// Ethertype not IPv4, IP protocol not UDP, or UDP destination port not 4791.
    NotRoce,
    /// The RPC magic is wrong.
    BadMagic,
    /// The buffer given to an emitter is too small.
    BufferTooSmall,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Error::Truncated => "truncated",
            Error::Malformed => "malformed",
            Error::BadChecksum => "bad IPv4 header checksum",
            Error::BadIcrc => "bad RoCEv2 ICRC",
            Error::NotRoce => "not a RoCEv2 packet",
            Error::BadMagic => "bad RPC magic",
            Error::BufferTooSmall => "buffer too small",
        })
    }
}

impl std::error::Error for Error {}

/// `Result` with this crate's [`Error`].
pub type Result<T> = core::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_is_short_and_distinct() {
        let all = [
            Error::Truncated,
            Error::Malformed,
            Error::BadChecksum,
            Error::BadIcrc,
            Error::NotRoce,
            Error::BadMagic,
            Error::BufferTooSmall,
        ];
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                assert_ne!(a.to_string(), b.to_string());
            }
        }
    }
}
