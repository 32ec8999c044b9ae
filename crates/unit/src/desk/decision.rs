//! What the desk decides of a trigger, as types: every source (the socket, NATS, any other)
//! branches on these, never on a message's text. Each says itself in words (`Display`): those
//! words are the socket's `error` and the fleet's `missed` reason, as they always were.

use crate::protocol::TriggerReply;
use crate::reach::JoinRefusal;
use crate::window::WindowError;

/// What became of one trigger brought to the desk.
#[derive(Clone, Debug)]
pub enum Decision {
    /// It opened a burst of its own, which records its window.
    Accepted(TriggerReply),
    /// It joined the burst being recorded, whose end moved out to hold its window.
    Joined(TriggerReply),
    /// It joined the burst being recorded, and what of its window lies past that burst's
    /// --max-burst goes on in the burst that continues it.
    Continued(TriggerReply),
    /// Not yet (only to a caller that asks again, `Patience::AskAgain`): asked again in a
    /// moment, it may be taken.
    Waiting(Waiting),
    /// It is not recorded.
    Refused(Refused),
}

impl Decision {
    /// The decision of an accepted trigger, by what its reply says it did.
    pub(crate) fn of_reply(reply: TriggerReply) -> Decision {
        assert!(reply.ok, "an accepted trigger's reply says so");
        match &reply.joined {
            None => Decision::Accepted(reply),
            Some(j) if j.continued_in.is_some() => Decision::Continued(reply),
            Some(_) => Decision::Joined(reply),
        }
    }
}

/// How long a source lets the desk wait for what stands in a trigger's way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Patience {
    /// Waits at the desk, a bounded while, for the first frame or for a burst that is ending
    /// (the socket: its client holds the connection for the answer).
    WaitHere,
    /// Never waits at the desk: `Waiting` instead, to ask again (the fleet, whose task waits
    /// without holding the unit's decisions).
    AskAgain,
}

/// What a trigger that is not decided yet waits for.
#[derive(Clone, Debug)]
pub enum Waiting {
    /// No frame has come: the unit has no data clock to place the window on.
    FirstFrame,
    /// A burst it cannot join holds the unit; it is free once that burst's writers are done.
    BurstInTheWay(Busy),
}

impl std::fmt::Display for Waiting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Waiting::FirstFrame => write!(f, "{}", WindowError::NothingBuffered),
            Waiting::BurstInTheWay(busy) => write!(f, "{busy}"),
        }
    }
}

/// A burst being recorded stands in a trigger's way.
#[derive(Clone, Debug, thiserror::Error)]
pub enum Busy {
    /// Its window could not join the burst.
    #[error("{busy} (it cannot join it: {0})", busy = crate::RecordError::Busy)]
    CannotJoin(JoinRefusal),
    /// The burst is ending, and its writers were not done within the wait.
    #[error(
        "{} (the burst is ending, and its writers were not done within {waited_s:.1} s)",
        crate::RecordError::Busy
    )]
    StillEnding { waited_s: f64 },
}

/// Why a trigger is not recorded.
#[derive(Clone, Debug, thiserror::Error)]
pub enum Refused {
    #[error("the unit is stopping: it takes no more triggers")]
    Stopping,
    /// A field of the request that is not what it must be (`at`, `pre_s`, `post_s`).
    #[error("{0}")]
    Malformed(String),
    #[error("an empty window (pre and post both 0): it would record nothing")]
    EmptyWindow,
    #[error("the window ({pre_s:.1} s before + {post_s:.1} s after) is longer than this unit's --max-window {max_s:.1} s")]
    TooLong { pre_s: f64, post_s: f64, max_s: f64 },
    /// Its id is no plain name (`snbuf_burst::check_burst_id`).
    #[error("{0}")]
    BadId(String),
    /// Its window cannot be placed on what the buffers hold (nothing yet, gone, too far ahead).
    #[error(transparent)]
    Window(#[from] WindowError),
    /// The outputs have no room for any of the window that holds the trigger.
    #[error("{0}")]
    NoRoom(String),
    #[error("burst {0} already exists")]
    BurstExists(String),
    #[error("trigger {trigger} was already recorded, in burst {burst}")]
    AlreadyRecorded { trigger: String, burst: String },
    /// A burst in progress is in the way, and the desk did not (or could no longer) wait.
    #[error(transparent)]
    Busy(#[from] Busy),
    /// The unit could not start recording it (a thread, a name in the output).
    #[error("{0}")]
    CannotStart(String),
}

impl Refused {
    /// A burst in progress is what stands in its way: the same trigger may be taken once that
    /// burst's writers are done.
    pub fn is_busy(&self) -> bool {
        matches!(self, Refused::Busy(_))
    }
}
