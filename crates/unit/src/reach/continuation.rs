//! What goes on past a burst's cap (--max-burst): the next burst, from the capped one's end,
//! with every trigger's part past it; and what a burst opens for.

use snbuf_burst::{AnsweredTrigger, Window};

/// The rest of the windows that joined a burst past --max-burst: recorded as the next burst,
/// from the first one's end (its cap) with no gap, as soon as its writers are done.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Continuation {
    /// The next burst's name.
    pub burst_id: String,
    /// Its window: from the capped burst's end to the latest end a trigger asked for.
    pub window: Window,
    /// Each trigger's part past the cap, as the next burst answers it.
    pub triggers: Vec<AnsweredTrigger>,
    /// The bursts it follows: the capped one, and where the first of them began.
    pub chain: Chain,
}

impl Continuation {
    /// The next burst, named `burst_id`, from `from` (the capped burst's end) for `first`'s
    /// part past it.
    pub(super) fn new(
        burst_id: String,
        from: u64,
        first: AnsweredTrigger,
        clock_hz: Option<u64>,
        chain: Chain,
    ) -> Self {
        assert!(chain.start <= from, "a chain begins before its next burst");
        assert!(
            first.covered_start_timestamp == from.max(first.window_start_timestamp)
                && first.covered_end_timestamp > first.covered_start_timestamp,
            "a continued trigger is covered from the cap (or its own start) on"
        );
        let mut window = Window::new(
            from,
            from,
            first.covered_end_timestamp,
            clock_hz.unwrap_or(1),
        );
        window.clock_hz = clock_hz;
        Continuation {
            burst_id,
            window,
            triggers: vec![first],
            chain,
        }
    }

    /// Another trigger's part past the cap: the window's end moves out to hold it.
    pub(super) fn add(&mut self, t: AnsweredTrigger) {
        assert!(
            t.covered_start_timestamp >= self.window.window_start_timestamp
                && t.covered_start_timestamp < t.covered_end_timestamp,
            "a trigger's part past the cap lies in the next burst's window"
        );
        let end = self
            .window
            .window_end_timestamp
            .max(t.covered_end_timestamp);
        let hz = self.window.clock_hz.unwrap_or(1).max(1) as f64;
        self.window.window_end_timestamp = end;
        self.window.post_s = Some((end - self.window.trigger_timestamp) as f64 / hz);
        self.triggers.push(t);
    }
}

/// What a burst opens for: the triggers it answers from the start (the one that opened it, or
/// those a continuation carries over) and the burst it continues, if any.
#[derive(Clone, Debug)]
pub struct Opening {
    pub triggers: Vec<AnsweredTrigger>,
    pub continues: Option<Chain>,
}

/// The bursts a continuation follows: the one before it, and where the first of them began (a
/// trigger whose window begins there or later joins, its part before this burst being in them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chain {
    /// The burst just before.
    pub previous: String,
    /// The first burst of the chain (the next ones are named after it: `ROOT-2`, `ROOT-3`),
    /// and where its window began.
    pub root: String,
    pub start: u64,
    /// The place in the chain of the burst that continues it (the root's is 1).
    pub index: u32,
}

impl Opening {
    /// A burst opened by trigger `first`.
    pub fn by(first: AnsweredTrigger) -> Opening {
        assert!(
            first.covered_start_timestamp <= first.covered_end_timestamp,
            "a trigger's covered part starts before it ends"
        );
        Opening {
            triggers: vec![first],
            continues: None,
        }
    }

    /// The continuation `c` (of the burst its chain names last).
    pub(crate) fn continuing(c: Continuation) -> Opening {
        assert!(
            !c.triggers.is_empty() && c.chain.previous != c.burst_id,
            "a continuation carries a trigger over, as a burst of its own"
        );
        Opening {
            continues: Some(c.chain),
            triggers: c.triggers,
        }
    }
}
