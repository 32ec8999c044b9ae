//! The clock used to time single operations.
//!
//! A 256 B non-temporal store with its fence takes about 100 ns here, and `Instant::now()` costs
//! about 26 ns, a quarter of what it measures. RDTSC costs about 10 ns, so when the TSC is
//! invariant (CPUID 8000_0007H:EDX[8]: constant rate, runs in every C-state) operations are timed
//! in TSC ticks, converted with a frequency calibrated against CLOCK_MONOTONIC at start-up. Results
//! record which clock was used and the calibrated frequency.

use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug)]
pub struct OpClock {
    kind: ClockKind,
    ticks_per_ns: f64,
    base: Instant,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ClockKind {
    Tsc,
    Monotonic,
}

impl OpClock {
    /// Calibrates over `calibration` (50 ms is plenty for 3 significant digits).
    pub fn calibrate(calibration: Duration) -> Self {
        let base = Instant::now();
        if !invariant_tsc() {
            return OpClock {
                kind: ClockKind::Monotonic,
                ticks_per_ns: 1.0,
                base,
            };
        }
        let t0 = Instant::now();
        let c0 = rdtsc();
        while t0.elapsed() < calibration {
            std::hint::spin_loop();
        }
        let c1 = rdtsc();
        let ns = t0.elapsed().as_nanos() as f64;
        OpClock {
            kind: ClockKind::Tsc,
            ticks_per_ns: (c1.wrapping_sub(c0)) as f64 / ns,
            base,
        }
    }

    /// A timestamp in clock ticks.
    #[inline(always)]
    pub fn now(&self) -> u64 {
        match self.kind {
            ClockKind::Tsc => rdtsc(),
            ClockKind::Monotonic => self.base.elapsed().as_nanos() as u64,
        }
    }

    #[inline(always)]
    pub fn ticks_to_ns(&self, ticks: u64) -> u64 {
        (ticks as f64 / self.ticks_per_ns) as u64
    }

    /// `rdtsc (invariant TSC, 2.30 GHz calibrated against CLOCK_MONOTONIC)` or `CLOCK_MONOTONIC`.
    pub fn describe(&self) -> String {
        match self.kind {
            ClockKind::Tsc => format!(
                "rdtsc (invariant TSC, {:.3} GHz calibrated against CLOCK_MONOTONIC)",
                self.ticks_per_ns
            ),
            ClockKind::Monotonic => "CLOCK_MONOTONIC".to_string(),
        }
    }

    pub fn tsc_hz(&self) -> Option<f64> {
        (self.kind == ClockKind::Tsc).then_some(self.ticks_per_ns * 1e9)
    }
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn rdtsc() -> u64 {
    // SAFETY: RDTSC is available on every x86-64 CPU and has no preconditions.
    unsafe { std::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
fn rdtsc() -> u64 {
    0
}

#[cfg(target_arch = "x86_64")]
fn invariant_tsc() -> bool {
    use std::arch::x86_64::__cpuid;
    if __cpuid(0x8000_0000).eax < 0x8000_0007 {
        return false;
    }
    __cpuid(0x8000_0007).edx & (1 << 8) != 0
}

#[cfg(not(target_arch = "x86_64"))]
fn invariant_tsc() -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_agrees_with_monotonic_time() {
        let c = OpClock::calibrate(Duration::from_millis(20));
        let t0 = Instant::now();
        let a = c.now();
        std::thread::sleep(Duration::from_millis(30));
        let b = c.now();
        let wall = t0.elapsed().as_nanos() as f64;
        let measured = c.ticks_to_ns(b - a) as f64;
        // Loose bounds: this guards the conversion, not the machine's timing.
        assert!(
            measured > wall * 0.5 && measured < wall * 2.0,
            "{measured} vs {wall}"
        );
        assert!(!c.describe().is_empty());
    }
}
