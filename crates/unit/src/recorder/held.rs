//! What a running unit's buffers hold: its newest and oldest frames, its data clock against
//! the wall clock, and each link's measured rate and span. What a trigger's window is placed on.

use crate::link_rates::{newest_of, oldest_of, LinkRate};
use crate::window::Held;

use super::{Unit, CLOCK_AGREES_S};

impl Unit {
    /// The newest frame's timestamp over the links: the unit's "now" in the detector's own
    /// ticks (a link that has sent nothing yet does not hold it back).
    pub fn newest_timestamp(&self) -> Option<u64> {
        self.buffers.iter().filter_map(newest_of).max()
    }

    /// The oldest timestamp every link with data still holds (the latest of the links'
    /// oldest): a window from here on is in every buffer.
    pub fn oldest_timestamp(&self) -> Option<u64> {
        self.buffers.iter().filter_map(oldest_of).max()
    }

    /// What the buffers hold now, for placing a window.
    pub fn held(&self) -> Held {
        Held {
            newest: self.newest_timestamp(),
            oldest: self.oldest_timestamp(),
            oldest_anywhere: self.buffers.iter().filter_map(oldest_of).min(),
        }
    }

    /// The detector's time at wall-clock time `unix_ns`, by this unit's data. When the data
    /// clock agrees with the wall clock (DUNE's timing system runs on GPS time, as the emulator
    /// does: the newest frame is within `CLOCK_AGREES_S` of now), the clock's reading at
    /// `unix_ns` itself, so that every unit places one trigger on the same tick. Otherwise (a
    /// timing system not on NTP time, a replay of last year's run) the newest frame, moved by the
    /// wall-clock time from now to `unix_ns`. None until a frame has arrived.
    pub fn data_time_at(&self, unix_ns: u64) -> Option<u64> {
        let newest = self.newest_timestamp()?;
        let now_ns = snbuf_quantity::now_unix_ns();
        let clock = self.config.clock();
        let behind_s = clock.seconds_between(newest, clock.ticks_at_unix_ns(now_ns));
        if behind_s.abs() <= CLOCK_AGREES_S {
            return Some(clock.ticks_at_unix_ns(unix_ns));
        }
        let offset_s = (unix_ns as f64 - now_ns as f64) / 1e9;
        Some(clock.offset(newest, offset_s))
    }

    /// Each link's data clock and rate as measured, with the span its buffer holds now in
    /// detector seconds.
    pub fn link_rates(&self) -> Vec<LinkRate> {
        let mut rates = self.rates.lock().expect("rates").rates();
        rates.resize_with(self.buffers.len(), LinkRate::default);
        let clock = self.config.clock();
        for (i, (r, b)) in rates.iter_mut().zip(&self.buffers).enumerate() {
            r.link = i as u32;
            r.buffer_span_s = match (oldest_of(b), newest_of(b)) {
                (Some(o), Some(n)) => Some(clock.seconds(n.saturating_sub(o))),
                _ => None,
            };
        }
        rates
    }
}
