//! What became of the bursts a unit recorded: the most recent ones (bounded, since a unit runs
//! for months) and how many there were in all, by final state.

use crate::protocol::{BurstOutcome, OutcomeState};

/// How many past bursts `status` lists.
pub const MAX_BURSTS_SHOWN: usize = 100;

/// The bursts `status` reports: the most recent ones and how many there were in all.
#[derive(Default)]
pub(super) struct BurstHistory {
    pub(super) recent: std::collections::VecDeque<BurstOutcome>,
    pub(super) total: u64,
    /// Bursts by final state (`sealed`, `failed`, `recovered`, `error`), over the whole run.
    pub(super) by_state: std::collections::BTreeMap<OutcomeState, u64>,
    /// Seconds of accepted windows the buffers no longer held (`Window::not_buffered_s`).
    pub(super) not_buffered_s: f64,
}

impl BurstHistory {
    /// A burst is over: counted, and kept among the recent ones.
    pub(super) fn push(&mut self, outcome: BurstOutcome) {
        self.total += 1;
        *self.by_state.entry(outcome.state).or_default() += 1;
        if self.recent.len() == MAX_BURSTS_SHOWN {
            self.recent.pop_front();
        }
        self.recent.push_back(outcome);
        debug_assert!(
            self.recent.len() <= MAX_BURSTS_SHOWN && self.recent.len() as u64 <= self.total
        );
    }

    /// The recent burst that trigger `id` is one of the triggers of, if any.
    pub(super) fn answering(&self, id: &str) -> Option<String> {
        self.recent
            .iter()
            .find(|b| b.triggers.iter().any(|t| t == id))
            .map(|b| b.burst_id.clone())
    }
}
