//! Panic-free big- and little-endian field access shared by every view.
//!
//! Every reader returns zeros for bytes that lie outside the buffer and every writer
//! ignores them, so an accessor can never panic, even on a view made with
//! `new_unchecked` over a short buffer. After a successful `check_len` every field a
//! view exposes lies inside its buffer, so the zeros are never observed there.

pub(crate) type Field = core::ops::Range<usize>;
pub(crate) type Rest = core::ops::RangeFrom<usize>;

#[inline]
pub(crate) fn array<const N: usize>(buf: &[u8], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    if let Some(src) = at.checked_add(N).and_then(|end| buf.get(at..end)) {
        out.copy_from_slice(src);
    }
    out
}

#[inline]
pub(crate) fn put<const N: usize>(buf: &mut [u8], at: usize, bytes: [u8; N]) {
    if let Some(dst) = at.checked_add(N).and_then(|end| buf.get_mut(at..end)) {
        dst.copy_from_slice(&bytes);
    }
}

#[inline]
pub(crate) fn u8_at(buf: &[u8], at: usize) -> u8 {
    buf.get(at).copied().unwrap_or(0)
}

#[inline]
pub(crate) fn set_u8(buf: &mut [u8], at: usize, value: u8) {
    if let Some(b) = buf.get_mut(at) {
        *b = value;
    }
}

#[inline]
pub(crate) fn be16(buf: &[u8], at: usize) -> u16 {
    u16::from_be_bytes(array(buf, at))
}

#[inline]
pub(crate) fn set_be16(buf: &mut [u8], at: usize, value: u16) {
    put(buf, at, value.to_be_bytes());
}

/// 24-bit big-endian (BTH DestQP and PSN, AETH MSN).
#[inline]
pub(crate) fn be24(buf: &[u8], at: usize) -> u32 {
    let [a, b, c] = array::<3>(buf, at);
    u32::from_be_bytes([0, a, b, c])
}

#[inline]
pub(crate) fn set_be24(buf: &mut [u8], at: usize, value: u32) {
    let [_, a, b, c] = value.to_be_bytes();
    put(buf, at, [a, b, c]);
}

#[inline]
pub(crate) fn be32(buf: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(array(buf, at))
}

#[inline]
pub(crate) fn set_be32(buf: &mut [u8], at: usize, value: u32) {
    put(buf, at, value.to_be_bytes());
}

#[inline]
pub(crate) fn be64(buf: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(array(buf, at))
}

#[inline]
pub(crate) fn set_be64(buf: &mut [u8], at: usize, value: u64) {
    put(buf, at, value.to_be_bytes());
}

#[inline]
pub(crate) fn le32(buf: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(array(buf, at))
}

#[inline]
pub(crate) fn set_le32(buf: &mut [u8], at: usize, value: u32) {
    put(buf, at, value.to_le_bytes());
}

#[inline]
pub(crate) fn le64(buf: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(array(buf, at))
}

#[inline]
pub(crate) fn set_le64(buf: &mut [u8], at: usize, value: u64) {
    put(buf, at, value.to_le_bytes());
}

/// The bytes of `range`, or an empty slice where the buffer is shorter.
#[inline]
pub(crate) fn slice(buf: &[u8], range: Field) -> &[u8] {
    buf.get(range).unwrap_or(&[])
}

#[inline]
pub(crate) fn slice_mut(buf: &mut [u8], range: Field) -> &mut [u8] {
    buf.get_mut(range).unwrap_or(&mut [])
}

#[inline]
pub(crate) fn rest(buf: &[u8], range: Rest) -> &[u8] {
    buf.get(range).unwrap_or(&[])
}

#[inline]
pub(crate) fn rest_mut(buf: &mut [u8], range: Rest) -> &mut [u8] {
    buf.get_mut(range).unwrap_or(&mut [])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_range_reads_zero_and_writes_nothing() {
        let mut buf = [0xAAu8; 3];
        assert_eq!(be32(&buf, 0), 0);
        assert_eq!(be16(&buf, usize::MAX), 0);
        assert_eq!(be24(&buf, 0), 0x00AA_AAAA);
        set_be32(&mut buf, 1, 0x1234_5678);
        set_be64(&mut buf, usize::MAX - 2, 1);
        assert_eq!(buf, [0xAA; 3]);
        assert!(slice(&buf, 2..9).is_empty());
        #[allow(clippy::reversed_empty_ranges)]
        let backwards = 3..1;
        assert!(slice(&buf, backwards).is_empty());
        assert!(rest(&buf, 4..).is_empty());
        assert_eq!(rest(&buf, 3..).len(), 0);
    }
}
