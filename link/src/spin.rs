//! Busy-poll policy.
//!
//! Spinning threads give the lowest latency when each has a core. With fewer cores than
//! spinners (CI has 2 for 3-4 spinners), pure spinning starves the thread that would make
//! progress, so in [`SpinMode::Shared`] a spinner spins briefly and then yields its core.
//! Benchmarks report which mode ran.
//!
//! The mode is a value the caller passes down to every spinner; nothing here reads the
//! environment. A program may take the PAUSE choice from [`PAUSE_VAR`] at its edge
//! ([`pause_asked_by_env`]), as a fallback for its command-line flag.

use std::fmt;
use std::hint::spin_loop;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpinMode {
    /// Every spinner has a core: spin without ever yielding. `pause`: execute the PAUSE
    /// instruction between polls that found nothing (off by default, see [`Backoff::new`]).
    Dedicated { pause: bool },
    /// More spinners than cores: spin a little (with PAUSE), then `yield_now`.
    Shared,
}

impl SpinMode {
    /// `Dedicated` (without PAUSE) when the machine has at least `spinners` cores (plus one
    /// for the rest of the process), `Shared` otherwise.
    pub fn for_spinners(spinners: usize) -> SpinMode {
        if crate::affinity::available_cores() > spinners {
            SpinMode::Dedicated { pause: false }
        } else {
            SpinMode::Shared
        }
    }

    /// The same mode, a `Dedicated` one with PAUSE between polls or not as `pause` says (a
    /// `Shared` spinner always pauses before it yields).
    pub fn with_pause(self, pause: bool) -> SpinMode {
        match self {
            SpinMode::Dedicated { .. } => SpinMode::Dedicated { pause },
            SpinMode::Shared => SpinMode::Shared,
        }
    }

    /// A `Dedicated` spinner that executes PAUSE between polls.
    pub fn pause(self) -> bool {
        self == SpinMode::Dedicated { pause: true }
    }

    /// The mode's name as [`parse`](SpinMode::parse) reads it (`dedicated`, `shared`); the
    /// PAUSE choice is apart from it ([`SpinMode::pause`]).
    pub fn as_str(&self) -> &'static str {
        match self {
            SpinMode::Dedicated { .. } => "dedicated",
            SpinMode::Shared => "shared",
        }
    }

    /// Parses `dedicated`, `shared` or `auto` (`auto` needs the spinner count); a
    /// `Dedicated` mode without PAUSE ([`SpinMode::with_pause`] adds it).
    pub fn parse(s: &str, spinners: usize) -> Option<SpinMode> {
        match s {
            "dedicated" => Some(SpinMode::Dedicated { pause: false }),
            "shared" => Some(SpinMode::Shared),
            "auto" => Some(SpinMode::for_spinners(spinners)),
            _ => None,
        }
    }
}

impl fmt::Display for SpinMode {
    /// What reports and plans name: `dedicated`, `dedicated+pause`, `shared`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())?;
        if self.pause() {
            f.write_str("+pause")?;
        }
        Ok(())
    }
}

/// The environment variable a program may read at its edge for the PAUSE choice, when its
/// command line does not make it (`--spin-pause`).
pub const PAUSE_VAR: &str = "ROCELINK_SPIN_PAUSE";

/// [`PAUSE_VAR`] is set to anything but `0`. For a program's edge only: libraries take the
/// choice in the [`SpinMode`] they are given.
pub fn pause_asked_by_env() -> bool {
    std::env::var_os(PAUSE_VAR).is_some_and(|v| v != "0")
}

/// Polls that find nothing before a `Shared` spinner yields. Long enough to catch an answer
/// that is already on its way (a few microseconds), short enough to hand the core over fast.
const SPINS_BEFORE_YIELD: u32 = 256;

/// Per-thread idle state of a busy-poll loop.
#[derive(Debug)]
pub struct Backoff {
    mode: SpinMode,
    idle: u32,
}

impl Backoff {
    /// A `Dedicated` spinner polls back to back, without the PAUSE instruction unless its
    /// mode asks for it: a PAUSE costs ~140 cycles on recent Intel cores (a late look at a
    /// line that just changed), and in a virtual machine a vCPU that keeps executing PAUSE is
    /// taken for a lock spinner and descheduled by the hypervisor (pause-loop exiting),
    /// microseconds at a time. The core is the spinner's alone, so nothing waits for the
    /// pipeline it keeps busy. `Dedicated { pause: true }` puts the PAUSE back, for comparison.
    pub fn new(mode: SpinMode) -> Self {
        Backoff { mode, idle: 0 }
    }

    pub fn mode(&self) -> SpinMode {
        self.mode
    }

    /// Call when a poll found nothing to do.
    #[inline]
    pub fn idle(&mut self) {
        match self.mode {
            SpinMode::Dedicated { pause } => {
                if pause {
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
        assert_eq!(SpinMode::parse("dedicated", 3), Some(SpinMode::Dedicated { pause: false }));
        assert_eq!(SpinMode::parse("auto", 1_000_000), Some(SpinMode::Shared));
        assert_eq!(SpinMode::parse("fast", 3), None);
    }

    #[test]
    fn pause_is_a_dedicated_spinners_choice() {
        let d = SpinMode::Dedicated { pause: false };
        assert!(!d.pause() && d.with_pause(true).pause());
        assert_eq!(SpinMode::Shared.with_pause(true), SpinMode::Shared);
        assert_eq!(
            (d.to_string(), d.with_pause(true).to_string(), SpinMode::Shared.to_string()),
            ("dedicated".into(), "dedicated+pause".into(), "shared".into())
        );
        assert_eq!(SpinMode::parse(d.with_pause(true).as_str(), 3), Some(d));
    }
}
