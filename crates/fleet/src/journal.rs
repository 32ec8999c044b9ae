//! A unit's own record of the fleet triggers it handled (`OUTPUT/fleet-triggers.jsonl`), on its
//! disk, synced before the trigger is acknowledged to JetStream. It makes "exactly once, or said"
//! hold across crashes, reconnects and redeliveries:
//! - a trigger delivered again (an acknowledgement lost with a server, a unit restarted) is found
//!   here and recorded nothing more;
//! - a trigger taken but whose burst never began (the unit died first) is turned into a `missed`
//!   one at the next start, so no trigger is silently neither recorded nor missed;
//! - a `missed` report stays owed until the event stream has stored it (an outbox), so a report
//!   lost with a connection is sent again, and JetStream's message id keeps it single.
//!
//! One JSON object per line, appended: `{"trigger_id", "outcome": "recording"|"missed",
//! "reason", "delay_s", "at_unix_ns"}` when handled, `{"trigger_id", "published": true}` once
//! its report is stored. A torn last line (a crash mid-append) is cut off; any other bad line is
//! an error.
//!
//! It does not grow for ever: once it holds `COMPACT_AT_LINES` lines it is rewritten (a new
//! file renamed over it, synced) with what JetStream could still deliver again (triggers handled
//! within `KEEP_FOR`) and every report still owed; a first line carries the count of missed
//! triggers dropped and the highest stream sequence. A crash during the rewrite leaves the old
//! file whole.
//!
//! A new journal's first line says when the unit joined the fleet (`joined_unix_ns`, kept by
//! every rewrite): a trigger consumer made anew for a unit that JetStream never delivered to
//! (killed before its first consumer existed, or one the cluster lost) starts from that moment,
//! so a trigger sent while it was down is still delivered and, if nothing of it can be recorded,
//! reported missed rather than never heard of. The line also carries `carried_missed: 0`, so an
//! older snbuf that rewrites journals reads it as the header it knows. The moment is the unit's
//! clock, compared with the servers' store times: a unit whose clock runs Δ ahead of theirs skips
//! what they stored in the Δ after it joined (DUNE's hosts keep their clocks to the timing
//! system's; NTP keeps them within milliseconds).

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub const FILE_NAME: &str = "fleet-triggers.jsonl";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// The unit took it: its burst (named after the trigger) was started.
    Recording,
    /// The unit could not record it, for `reason`.
    Missed,
}

/// The way a trigger's handled copy reached the unit: what the fleet trials measure the deaf time
/// of, path by path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Route {
    /// Published on plain NATS, taken the moment it arrived.
    Fast,
    /// Delivered by the unit's durable JetStream consumer.
    JetStream,
    /// Read straight from the trigger stream when a connection came back.
    CatchUp,
    /// Written by a newer snbuf: read as unknown, rather than the journal refused.
    #[serde(other)]
    Unknown,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Handled {
    pub outcome: Outcome,
    pub reason: Option<String>,
    pub delay_s: f64,
    /// Its `missed` event is stored in JetStream (always true for `recording`: a burst reports
    /// itself when it ends).
    pub published: bool,
    /// When it was handled (0: before the journal kept it).
    pub at_unix_ns: u64,
    /// How the copy that was handled came (None in journals written before it was kept).
    pub route: Option<Route>,
    /// The burst that records it, when that is not the one named after it (a trigger that
    /// joined the burst being recorded).
    pub burst_id: Option<String>,
}

/// How long a handled trigger is kept: JetStream may deliver a trigger again as long as its
/// stream keeps it (`layout::TRIGGER_MAX_AGE`), to a unit that was down meanwhile; twice that.
pub const KEEP_FOR: std::time::Duration =
    std::time::Duration::from_secs(2 * crate::layout::TRIGGER_MAX_AGE.as_secs());

/// The journal is rewritten once it holds this many lines (a trigger a minute for a week).
pub const COMPACT_AT_LINES: usize = 10_000;

#[derive(Serialize, Deserialize)]
struct Line {
    /// Empty on the first line of a rewritten journal (`carried_missed`).
    #[serde(default)]
    trigger_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    outcome: Option<Outcome>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    #[serde(default)]
    delay_s: f64,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    published: bool,
    /// Its sequence in the trigger stream, when JetStream delivered it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    stream_seq: Option<u64>,
    /// The burst that records it, when not the one named after it (it joined another).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    burst_id: Option<String>,
    /// When it was handled (absent in journals written before it was kept: 0, the oldest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    at_unix_ns: Option<u64>,
    /// How the handled copy came.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    route: Option<Route>,
    /// The first line of a rewritten journal: missed triggers no longer listed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    carried_missed: Option<u64>,
    /// The first line of a journal: when the unit joined the fleet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    joined_unix_ns: Option<u64>,
}

impl Line {
    /// A line about the journal, not about a trigger: what a rewrite carries over, and since
    /// when the unit has been in the fleet.
    fn header(carried_missed: u64, stream_seq: Option<u64>, joined_unix_ns: Option<u64>) -> Line {
        Line {
            trigger_id: String::new(),
            outcome: None,
            reason: None,
            delay_s: 0.0,
            published: false,
            stream_seq,
            burst_id: None,
            at_unix_ns: Some(snbuf_quantity::now_unix_ns()),
            route: None,
            carried_missed: Some(carried_missed),
            joined_unix_ns,
        }
    }
}

pub struct TriggerJournal {
    path: PathBuf,
    /// The file appended to; None after a rewrite whose new file could not be opened (the next
    /// append opens it, or fails: nothing goes to the replaced file).
    file: Option<File>,
    handled: BTreeMap<String, Handled>,
    /// The highest trigger-stream sequence handled: a consumer made anew starts after it.
    last_stream_seq: Option<u64>,
    /// Missed triggers dropped by rewrites (still counted by `missed`).
    carried_missed: u64,
    /// When the unit joined the fleet (None: a journal an older snbuf began).
    joined_unix_ns: Option<u64>,
    /// Lines in the file, and how many make it due for a rewrite (twice what the last rewrite
    /// kept, at least `COMPACT_AT_LINES`: a journal that must keep much is not rewritten at
    /// every line).
    lines: usize,
    compact_at: usize,
}

/// What a journal's text holds.
struct Read {
    handled: BTreeMap<String, Handled>,
    last_stream_seq: Option<u64>,
    carried_missed: u64,
    joined_unix_ns: Option<u64>,
    /// Its lines, a torn last one included.
    lines: usize,
}

/// Reads a journal's text: a torn last line (a crash mid-append: that trigger was never
/// acknowledged) is left out; any other bad line is an error.
fn read_lines(text: &str) -> Result<Read, String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut r = Read {
        handled: BTreeMap::new(),
        last_stream_seq: None,
        carried_missed: 0,
        joined_unix_ns: None,
        lines: lines.len(),
    };
    for (n, line) in lines.iter().enumerate() {
        let l: Line = match serde_json::from_str(line) {
            Ok(l) => l,
            Err(_) if n + 1 == lines.len() && !text.ends_with('\n') => break,
            Err(e) => return Err(format!("line {}: {e}", n + 1)),
        };
        r.last_stream_seq = r.last_stream_seq.max(l.stream_seq);
        r.joined_unix_ns = r.joined_unix_ns.or(l.joined_unix_ns);
        match l.outcome {
            _ if l.carried_missed.is_some() => {
                r.carried_missed += l.carried_missed.unwrap_or(0);
            }
            Some(outcome) => {
                r.handled.insert(
                    l.trigger_id,
                    Handled {
                        outcome,
                        reason: l.reason,
                        delay_s: l.delay_s,
                        published: outcome == Outcome::Recording || l.published,
                        burst_id: l.burst_id,
                        at_unix_ns: l.at_unix_ns.unwrap_or(0),
                        route: l.route,
                    },
                );
            }
            None if l.published => {
                if let Some(h) = r.handled.get_mut(&l.trigger_id) {
                    h.published = true;
                }
            }
            None => return Err(format!("line {}: neither outcome nor published", n + 1)),
        }
    }
    Ok(r)
}

/// The journal file (created if need be) opened to append to, whose `text` was just read: a torn
/// last line is cut off (it was never acknowledged), so that the next record starts on a line of
/// its own and the file reads back whole.
fn open_for_appending(path: &Path, text: &str) -> std::io::Result<std::fs::File> {
    let file = OpenOptions::new().create(true).append(true).open(path)?;
    if !text.is_empty() && !text.ends_with('\n') {
        let whole = text.rfind('\n').map_or(0, |i| i + 1);
        file.set_len(whole as u64)?;
        file.sync_data()?;
    }
    Ok(file)
}

impl TriggerJournal {
    /// The journal in `output_dir`, read (or created). A trigger it says was `recording` but whose
    /// burst directory does not exist is turned into a `missed` one, owed to the fleet.
    pub fn open(output_dir: &Path) -> Result<TriggerJournal, String> {
        let path = output_dir.join(FILE_NAME);
        let say = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(say(&e)),
        };
        let Read {
            handled,
            last_stream_seq,
            carried_missed,
            joined_unix_ns,
            lines,
        } = read_lines(&text).map_err(|e| say(&e))?;
        let file = open_for_appending(&path, &text).map_err(|e| say(&e))?;
        // Not one whole line: a new journal (or its first line torn by a crash, cut off).
        let new = !text.contains('\n');
        let mut j = TriggerJournal {
            path,
            file: Some(file),
            handled,
            last_stream_seq,
            carried_missed,
            joined_unix_ns,
            lines,
            compact_at: COMPACT_AT_LINES,
        };
        if new || j.joined_unix_ns().is_none() {
            // The unit joins now (or, for a journal an older snbuf began that holds no trigger,
            // is taken to have joined now). The line and the file's name in its directory are
            // durable before the unit takes any trigger: without them a restart could not know
            // since when to ask its stream.
            let now = snbuf_quantity::now_unix_ns();
            j.append(&Line::header(0, None, Some(now)))?;
            snbuf_persist::replace::sync_dir(output_dir)
                .map_err(|e| format!("{}: {e}", output_dir.display()))?;
            j.joined_unix_ns = Some(now);
        }
        j.miss_orphans(output_dir)?;
        j.compact_if_due();
        Ok(j)
    }

    /// A trigger the journal says was `recording` whose burst directory does not exist: the
    /// unit stopped after taking it, before its burst began. Recorded `missed`, owed to the
    /// fleet.
    fn miss_orphans(&mut self, output_dir: &Path) -> Result<(), String> {
        let orphans: Vec<(String, Route)> = self
            .handled
            .iter()
            .filter(|(id, h)| {
                let burst = h.burst_id.as_deref().unwrap_or(id);
                h.outcome == Outcome::Recording && !output_dir.join(burst).exists()
            })
            .map(|(id, h)| (id.clone(), h.route.unwrap_or(Route::Fast)))
            .collect();
        for (id, route) in orphans {
            let why = "the unit stopped after taking the trigger, before its burst began";
            self.record(
                &id,
                Outcome::Missed,
                Some(why.into()),
                0.0,
                (route, None),
                None,
            )?;
        }
        Ok(())
    }

    /// Rewrites the journal with what it must still hold at `now_unix_ns` (see the module
    /// comment): a new file, synced, renamed over the old one, the directory synced; then this
    /// journal appends to it. On an error the old file is whole and still appended to.
    pub fn compact(&mut self, now_unix_ns: u64) -> Result<(), String> {
        let keep_from = now_unix_ns.saturating_sub(KEEP_FOR.as_nanos() as u64);
        let (kept, dropped): (BTreeMap<String, Handled>, BTreeMap<String, Handled>) =
            std::mem::take(&mut self.handled)
                .into_iter()
                .partition(|(_, h)| !h.published || h.at_unix_ns >= keep_from);
        let dropped_missed = dropped
            .values()
            .filter(|h| h.outcome == Outcome::Missed)
            .count() as u64;
        let carried = self.carried_missed + dropped_missed;
        let mut text = Vec::new();
        let mut put = |line: &Line| {
            text.extend(serde_json::to_vec(line).expect("journal lines serialise"));
            text.push(b'\n');
        };
        put(&Line {
            at_unix_ns: Some(now_unix_ns),
            ..Line::header(carried, self.last_stream_seq, self.joined_unix_ns())
        });
        for (id, h) in &kept {
            put(&Line {
                trigger_id: id.clone(),
                outcome: Some(h.outcome),
                reason: h.reason.clone(),
                delay_s: h.delay_s,
                published: h.published && h.outcome == Outcome::Missed,
                stream_seq: None,
                burst_id: h.burst_id.clone(),
                at_unix_ns: Some(h.at_unix_ns),
                route: h.route,
                carried_missed: None,
                joined_unix_ns: None,
            });
        }
        let say = |e: &dyn std::fmt::Display| format!("{}: {e}", self.path.display());
        let rewritten = snbuf_persist::replace::replace_file(
            &self.path,
            &text,
            snbuf_persist::replace::ReplaceDurability::Durable,
        );
        match rewritten {
            Ok(()) => {
                // The old file is gone from the directory: never append to it again.
                self.file = OpenOptions::new().append(true).open(&self.path).ok();
                self.handled = kept;
                self.carried_missed = carried;
                self.lines = 1 + self.handled.len();
                self.compact_at = COMPACT_AT_LINES.max(2 * self.lines);
                Ok(())
            }
            Err(e) => {
                // Nothing lost: the entries are put back, and the old file is still in use.
                self.handled = kept.into_iter().chain(dropped).collect();
                Err(say(&e))
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What this unit did with trigger `id`, if it handled it.
    pub fn get(&self, id: &str) -> Option<&Handled> {
        self.handled.get(id)
    }

    /// When this unit joined the fleet: the journal's first line, or for a journal an older snbuf
    /// began, the oldest trigger it holds (None: it holds none).
    pub fn joined_unix_ns(&self) -> Option<u64> {
        self.joined_unix_ns.or_else(|| {
            self.handled
                .values()
                .map(|h| h.at_unix_ns)
                .filter(|&t| t > 0)
                .min()
        })
    }

    /// The highest trigger-stream sequence this unit handled, if JetStream delivered any.
    pub fn last_stream_seq(&self) -> Option<u64> {
        self.last_stream_seq
    }

    /// Records the outcome of trigger `id` (delivered as `stream_seq` of the trigger stream, or by
    /// the fast path; recorded in `burst` when it joined a burst named otherwise), durably:
    /// returns only once it is on the disk.
    pub fn record(
        &mut self,
        id: &str,
        outcome: Outcome,
        reason: Option<String>,
        delay_s: f64,
        (route, stream_seq): (Route, Option<u64>),
        burst: Option<&str>,
    ) -> Result<(), String> {
        debug_assert!(
            stream_seq.is_none() || route == Route::JetStream,
            "a stream sequence comes with a JetStream delivery only"
        );
        let burst_id = burst.filter(|b| *b != id).map(str::to_string);
        let at_unix_ns = snbuf_quantity::now_unix_ns();
        self.append(&Line {
            trigger_id: id.into(),
            outcome: Some(outcome),
            reason: reason.clone(),
            delay_s,
            published: false,
            stream_seq,
            burst_id: burst_id.clone(),
            at_unix_ns: Some(at_unix_ns),
            route: Some(route),
            carried_missed: None,
            joined_unix_ns: None,
        })?;
        self.last_stream_seq = self.last_stream_seq.max(stream_seq);
        self.handled.insert(
            id.into(),
            Handled {
                outcome,
                reason,
                delay_s,
                published: outcome == Outcome::Recording,
                burst_id,
                at_unix_ns,
                route: Some(route),
            },
        );
        self.compact_if_due();
        Ok(())
    }

    /// Trigger `id`'s `missed` event is stored in JetStream.
    pub fn mark_published(&mut self, id: &str) -> Result<(), String> {
        self.append(&Line {
            trigger_id: id.into(),
            outcome: None,
            reason: None,
            delay_s: 0.0,
            published: true,
            stream_seq: None,
            burst_id: None,
            at_unix_ns: None,
            route: None,
            carried_missed: None,
            joined_unix_ns: None,
        })?;
        if let Some(h) = self.handled.get_mut(id) {
            h.published = true;
        }
        self.compact_if_due();
        Ok(())
    }

    /// How many triggers this unit missed, over its whole life.
    pub fn missed(&self) -> u64 {
        self.carried_missed
            + self
                .handled
                .values()
                .filter(|h| h.outcome == Outcome::Missed)
                .count() as u64
    }

    /// The missed triggers whose event is not yet stored, oldest id first.
    pub fn owed(&self) -> Vec<(String, Handled)> {
        self.handled
            .iter()
            .filter(|(_, h)| !h.published)
            .map(|(id, h)| (id.clone(), h.clone()))
            .collect()
    }

    fn append(&mut self, line: &Line) -> Result<(), String> {
        let mut bytes = serde_json::to_vec(line).expect("journal lines serialise");
        bytes.push(b'\n');
        if self.file.is_none() {
            let opened = OpenOptions::new().append(true).open(&self.path);
            self.file = Some(opened.map_err(|e| format!("{}: {e}", self.path.display()))?);
        }
        let file = self.file.as_mut().expect("opened above");
        // One write of the whole line, then a sync: an error of either (EIO, ENOSPC) is returned
        // and the trigger is not acknowledged, so JetStream delivers it again.
        file.write_all(&bytes)
            .and_then(|()| file.sync_data())
            .map_err(|e| format!("{}: {e}", self.path.display()))?;
        self.lines += 1;
        Ok(())
    }

    /// Rewrites the journal once it is due (called once what was just appended is also in
    /// memory, so that the rewrite holds it). What was appended is durable whatever comes of
    /// this: a failed rewrite is said, and tried again at the next line.
    fn compact_if_due(&mut self) {
        if self.lines >= self.compact_at {
            if let Err(e) = self.compact(snbuf_quantity::now_unix_ns()) {
                tracing::warn!("the trigger journal could not be rewritten: {e}");
            }
        }
    }
}

#[cfg(test)]
#[path = "journal_tests.rs"]
mod tests;
