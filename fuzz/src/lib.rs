//! Helpers shared by the fuzz targets.
//!
//! Stateful targets (the ECB server, the QEC stage, the NIC) read their input as a sequence
//! of records, so that one input drives a conversation: each record is a tag byte, a
//! little-endian u16 length and that many bytes (fewer when the input ends first). The
//! seed script (`scripts/fuzz`) writes its seeds in this format.

/// Most records one input is cut into (bounds the time of one execution).
pub const MAX_RECORDS: usize = 64;

/// One record: what the tag asks of the target, and the bytes.
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    pub tag: u8,
    pub bytes: &'a [u8],
}

/// Cuts `data` into at most [`MAX_RECORDS`] records (module docs).
pub fn records(mut data: &[u8]) -> impl Iterator<Item = Record<'_>> {
    std::iter::from_fn(move || {
        let (&tag, rest) = data.split_first()?;
        let (len, rest) = match rest {
            [a, b, rest @ ..] => (usize::from(u16::from_le_bytes([*a, *b])), rest),
            _ => (rest.len(), &[][..]),
        };
        let (bytes, rest) = rest.split_at(len.min(rest.len()));
        data = rest;
        Some(Record { tag, bytes })
    })
    .take(MAX_RECORDS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_split_and_stop() {
        let data = [7, 2, 0, b'a', b'b', 9, 5, 0, b'c'];
        let r: Vec<_> = records(&data).map(|r| (r.tag, r.bytes.to_vec())).collect();
        assert_eq!(r, vec![(7, b"ab".to_vec()), (9, b"c".to_vec())]);
        assert_eq!(records(&[1, 0]).count(), 1, "a short length takes the rest");
        assert_eq!(records(&[]).count(), 0);
        assert_eq!(records(&[0u8; 1000]).count(), MAX_RECORDS);
    }
}
