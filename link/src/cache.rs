//! Cache hints for memory another agent reads next (a thread on another core, a device across
//! PCIe). Hints only: they move no data into or out of the program, change no contents and no
//! ordering, and cost a few cycles where the CPU lacks them.

/// Hints the CPU to move the cache lines of `[start, start + len)` out of this core's private
/// caches into the shared last-level cache (x86 `CLDEMOTE`; it decodes as a NOP where the CPU
/// lacks it; nothing elsewhere). For lines written here and read next elsewhere: the reader's
/// miss is then served by the shared cache instead of a snoop of this core.
///
/// # Safety
/// The range must lie inside one allocation (it is never read or written through; the
/// instruction takes addresses only).
#[inline]
pub unsafe fn demote(start: *const u8, len: usize) {
    if len == 0 {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    {
        let end = start as usize + len;
        let mut line = start as usize & !63;
        while line < end {
            // SAFETY: the line overlaps the caller's range (in an allocation); CLDEMOTE reads
            // and writes nothing the program sees and cannot fault.
            unsafe { std::arch::asm!("cldemote [{0}]", in(reg) line, options(nostack, preserves_flags, readonly)) };
            line += 64;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = start;
}

#[cfg(test)]
mod tests {
    #[test]
    fn demote_changes_nothing() {
        // runs the instruction on this CPU too (a NOP where it lacks CLDEMOTE)
        let v: Vec<u8> = (0..=255).collect();
        // SAFETY: inside `v`
        unsafe {
            super::demote(v.as_ptr().wrapping_add(3), 200);
            super::demote(v.as_ptr(), 0);
        }
        assert!(v.iter().enumerate().all(|(i, &b)| b == i as u8));
    }
}
