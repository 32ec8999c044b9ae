//! What the tasks of a unit's fleet link share (`Link`: the unit, its journal, the decision
//! lock), and how they publish its events: the trigger handling and the link's own tasks both
//! use these, neither through the other.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, context::Publish};
use snbuf_unit::desk::TriggerDesk;

use crate::journal::TriggerJournal;
use crate::schema::*;
use snbuf_quantity::now_unix_ns;

/// What the link's tasks share.
pub(crate) struct Link {
    pub(crate) unit: String,
    pub(crate) desk: Arc<TriggerDesk>,
    /// Bursts already published as events.
    pub(crate) published: std::sync::atomic::AtomicU64,
    pub(crate) book: Mutex<Book>,
    /// Held while one copy of a trigger is decided (duplicate check, window, the unit's answer,
    /// journal), so the two copies of a trigger are never both taken. Never held across a wait
    /// for a burst in progress: a copy that waits lets the other be decided meanwhile.
    pub(crate) decide: tokio::sync::Mutex<()>,
    pub(crate) export: Option<Arc<dyn ExportReporter>>,
    pub(crate) stop: Arc<AtomicBool>,
}

/// The link's state across reconnections; locked briefly, never across an await.
pub(crate) struct Book {
    /// What this unit did with each trigger, on its disk: the duplicate check and the outbox of
    /// `missed` reports.
    pub(crate) journal: TriggerJournal,
    /// Triggers handled from the fast path whose JetStream copy has not come yet.
    pub(crate) fast_handled: FastHandled,
    /// Exported bursts collected but not yet published (kept across a lost connection).
    pub(crate) exported_unpublished: Vec<String>,
    /// The trigger consumer this run bound to, once it has.
    pub(crate) consumer: Option<jetstream::consumer::Info>,
    /// The fleet's streams were checked (once per run).
    pub(crate) layout_checked: bool,
}

impl Link {
    pub(crate) fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        self.book.lock().expect("the link's book")
    }

    /// A line of the unit's log about its fleet link.
    pub(crate) fn say(&self, line: &str) {
        tracing::info!("{line}")
    }

    pub(crate) fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

pub(crate) async fn publish_event(
    js: &jetstream::Context,
    link: &Link,
    kind: EventKind,
    burst: Option<&str>,
    trigger: Option<&str>,
) -> Result<(), String> {
    let event = kind.name().to_string();
    debug_assert!(
        !matches!(kind, EventKind::Other { .. }),
        "a unit publishes only kinds it knows"
    );
    let e = UnitEvent {
        schema: SCHEMA,
        unit: link.unit.clone(),
        sent_unix_ns: now_unix_ns(),
        burst_id: burst.map(str::to_string),
        trigger_id: trigger.map(str::to_string),
        kind,
        received_detail: None,
    };
    let body = serde_json::to_vec(&e).expect("events serialise");
    let mut publish = Publish::build().payload(body.into());
    // One event of a kind per trigger or burst: a publish retried after a lost acknowledgement
    // is stored once. (A `duplicate` may happen again, and is said again.)
    if !matches!(e.kind, EventKind::Duplicate {}) {
        if let Some(key) = trigger.or(burst) {
            publish = publish.message_id(format!("{}.{event}.{}", link.unit, header_safe(key)));
        }
    }
    js.send_publish(event_subject(&link.unit), publish)
        .await
        .map_err(|e| format!("publish event: {e}"))?
        .await
        .map_err(|e| format!("event not stored: {e}"))?;
    Ok(())
}

/// Publishes every `missed` report the journal still owes the fleet, marking each once stored.
pub(crate) async fn publish_owed(js: &jetstream::Context, link: &Link) -> Result<(), String> {
    let owed = link.book().journal.owed();
    for (id, h) in owed {
        let reason = EventReason {
            reason: h.reason,
            delay_s: h.delay_s,
        };
        publish_event(js, link, EventKind::Missed(reason), None, Some(&id)).await?;
        link.book().journal.mark_published(&id)?;
    }
    Ok(())
}

/// What the unit's exporter reports, if it has one: its progress for the heartbeat, and the
/// bursts it exported since the last call (each published as an `exported` event).
pub trait ExportReporter: Send + Sync {
    fn progress(&self) -> snbuf_export::queue::ExportProgress;
    fn take_exported(&self) -> Vec<String>;
}

/// The fast path's ids whose JetStream copy is still due, so that copy is known as the design's
/// second copy rather than a duplicate. Bounded: an id is dropped once its copy came, or after
/// `FAST_HANDLED_KEPT` (JetStream's copy comes within seconds, or after a consumer is made anew,
/// within its duplicate window), or when more than `FAST_HANDLED_MAX` are held (the oldest).
#[derive(Default)]
pub(crate) struct FastHandled {
    ids: std::collections::VecDeque<(String, Instant)>,
}

const FAST_HANDLED_KEPT: Duration = Duration::from_secs(3600);
const FAST_HANDLED_MAX: usize = 4096;

impl FastHandled {
    pub(crate) fn insert(&mut self, id: &str) {
        while self.ids.len() >= FAST_HANDLED_MAX
            || self
                .ids
                .front()
                .is_some_and(|(_, at)| at.elapsed() > FAST_HANDLED_KEPT)
        {
            self.ids.pop_front();
        }
        self.ids.push_back((id.to_string(), Instant::now()));
        assert!(self.ids.len() <= FAST_HANDLED_MAX);
    }

    /// Whether `id` was handled from the fast path (and forgets it).
    pub(crate) fn remove(&mut self, id: &str) -> bool {
        match self.ids.iter().position(|(i, _)| i == id) {
            Some(k) => {
                self.ids.remove(k);
                true
            }
            None => false,
        }
    }
}

/// `key` as it may stand in a NATS header: a refused trigger's id may hold anything (a newline
/// there would end the header and break every reader of the stream), so anything but letters,
/// digits, `.`, `_` and `-` is written as `%XX`, which no plain id contains.
fn header_safe(key: &str) -> String {
    key.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'.' | b'_' | b'-' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fast_path_ids_are_bounded_and_the_newest_kept() {
        let mut f = FastHandled::default();
        for k in 0..3 * FAST_HANDLED_MAX {
            f.insert(&format!("t{k}"));
        }
        assert_eq!(f.ids.len(), FAST_HANDLED_MAX);
        let newest = format!("t{}", 3 * FAST_HANDLED_MAX - 1);
        assert!(f.remove(&newest), "the newest is known");
        assert!(!f.remove("t0"), "the oldest went");
        assert!(!f.remove(&newest), "forgotten once taken");
    }
}
