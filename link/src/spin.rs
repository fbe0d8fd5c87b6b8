//! Busy-poll policy.
//!
//! Spinning threads give the lowest latency when each has a core. With fewer cores than
//! spinners (CI has 2 for 3-4 spinners), pure spinning starves the thread that would make
//! progress, so in [`SpinMode::Shared`] a spinner spins briefly and then yields its core.
//! Benchmarks report which mode ran.

use std::hint::spin_loop;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpinMode {
    /// Every spinner has a core: spin without ever yielding.
    Dedicated,
    /// More spinners than cores: spin a little, then `yield_now`.
    Shared,
}

impl SpinMode {
    /// `Dedicated` when the machine has at least `spinners` cores (plus one for the rest of
    /// the process), `Shared` otherwise.
    pub fn for_spinners(spinners: usize) -> SpinMode {
        if crate::affinity::available_cores() > spinners {
            SpinMode::Dedicated
        } else {
            SpinMode::Shared
        }
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            SpinMode::Dedicated => "dedicated",
            SpinMode::Shared => "shared",
        }
    }

    /// Parses `dedicated`, `shared` or `auto` (`auto` needs the spinner count).
    pub fn parse(s: &str, spinners: usize) -> Option<SpinMode> {
        match s {
            "dedicated" => Some(SpinMode::Dedicated),
            "shared" => Some(SpinMode::Shared),
            "auto" => Some(SpinMode::for_spinners(spinners)),
            _ => None,
        }
    }
}

/// Polls that find nothing before a `Shared` spinner yields. Long enough to catch an answer
/// that is already on its way (a few microseconds), short enough to hand the core over fast.
const SPINS_BEFORE_YIELD: u32 = 256;

/// Per-thread idle state of a busy-poll loop.
#[derive(Debug)]
pub struct Backoff {
    mode: SpinMode,
    idle: u32,
    /// `Dedicated` spinners execute PAUSE between polls only when `ROCELINK_SPIN_PAUSE` is set.
    pause: bool,
}

impl Backoff {
    /// A `Dedicated` spinner polls back to back, without the PAUSE instruction: a PAUSE costs
    /// ~140 cycles on recent Intel cores (a late look at a line that just changed), and in a
    /// virtual machine a vCPU that keeps executing PAUSE is taken for a lock spinner and
    /// descheduled by the hypervisor (pause-loop exiting), microseconds at a time. The core is
    /// the spinner's alone, so nothing waits for the pipeline it keeps busy.
    /// `ROCELINK_SPIN_PAUSE=1` (read here, once per loop) puts the PAUSE back, for comparison.
    pub fn new(mode: SpinMode) -> Self {
        Backoff { mode, idle: 0, pause: std::env::var_os("ROCELINK_SPIN_PAUSE").is_some_and(|v| v != "0") }
    }

    pub fn mode(&self) -> SpinMode {
        self.mode
    }

    /// Call when a poll found nothing to do.
    #[inline]
    pub fn idle(&mut self) {
        match self.mode {
            SpinMode::Dedicated => {
                if self.pause {
                    spin_loop();
                }
            }
            SpinMode::Shared => {
                self.idle = self.idle.saturating_add(1);
                if self.idle >= SPINS_BEFORE_YIELD {
                    std::thread::yield_now();
                } else {
                    spin_loop();
                }
            }
        }
    }

    /// Call when a poll found work.
    #[inline]
    pub fn reset(&mut self) {
        self.idle = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_modes() {
        assert_eq!(SpinMode::parse("shared", 3), Some(SpinMode::Shared));
        assert_eq!(SpinMode::parse("dedicated", 3), Some(SpinMode::Dedicated));
        assert_eq!(SpinMode::parse("auto", 1_000_000), Some(SpinMode::Shared));
        assert_eq!(SpinMode::parse("fast", 3), None);
    }
}
