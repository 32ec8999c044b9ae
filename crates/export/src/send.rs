//! Sending one object of an export: whole when it fits one part, else as a multipart upload
//! resumed from the journal, at the export's pace.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::destination::{ExportStore, Part, StoreError};
use crate::journal::{Journal, UPLOAD_TRIES};
use crate::{read_at, ExportError};

/// One run's sending: what it sent and resumed, held to its rate.
pub(crate) struct Sending<P: FnMut(u64)> {
    rate_bytes_per_s: Option<u64>,
    /// Since when the rate counts: time spent coding or reading objects back is added to it.
    paced_since: Instant,
    pub sent_bytes: u64,
    pub parts_resumed: u64,
    progress: P,
}

impl<P: FnMut(u64)> Sending<P> {
    pub fn new(rate_bytes_per_s: Option<u64>, progress: P) -> Self {
        Sending {
            rate_bytes_per_s,
            paced_since: Instant::now(),
            sent_bytes: 0,
            parts_resumed: 0,
            progress,
        }
    }

    /// Time that did not go to sending: it does not count towards the rate.
    pub fn not_sending(&mut self, d: Duration) {
        self.paced_since += d;
    }

    /// Sleeps until `n` more bytes are due (called before sending them, so that the last part
    /// also waits its turn).
    fn pace(&self, n: u64) {
        if let Some(r) = self.rate_bytes_per_s {
            let due = Duration::from_secs_f64((self.sent_bytes + n) as f64 / r as f64);
            if let Some(wait) = due.checked_sub(self.paced_since.elapsed()) {
                std::thread::sleep(wait);
            }
        }
    }

    fn sent(&mut self, n: u64) {
        self.sent_bytes += n;
        (self.progress)(self.sent_bytes);
    }
}

fn store_err(what: &str) -> impl Fn(StoreError) -> ExportError + '_ {
    move |e| ExportError::Store(format!("{what}: {e}"))
}

/// The object to send: the local file `path`, as `file` of the journal, to `key`.
pub(crate) struct Object<'a> {
    pub file: &'a str,
    pub path: &'a Path,
    pub key: &'a str,
    pub size_bytes: u64,
}

/// Sends `o` in one request when it fits one part.
pub(crate) fn send_whole<P: FnMut(u64)>(
    store: &dyn ExportStore,
    o: &Object,
    sending: &mut Sending<P>,
) -> Result<(), ExportError> {
    sending.pace(o.size_bytes);
    let data = read_at(o.path, 0, o.size_bytes as usize)?;
    store.put(o.key, data).map_err(store_err(o.key))?;
    sending.sent(o.size_bytes);
    Ok(())
}

/// Sends `o` as a multipart upload, resuming the one the journal holds: each part recorded in
/// the journal as the store acknowledges it. A run that fails without adding a part counts
/// against the upload; at `UPLOAD_TRIES` in a row it is given up, and the next run starts over.
pub(crate) fn send_multipart<P: FnMut(u64)>(
    store: &dyn ExportStore,
    dir: &Path,
    journal: &mut Journal,
    o: &Object,
    part_bytes: u64,
    sending: &mut Sending<P>,
) -> Result<(), ExportError> {
    let attempt = send_parts(store, dir, journal, o, part_bytes, sending);
    let Err(e) = attempt else { return Ok(()) };
    let progress = journal.get(o.file);
    progress.failed_runs += 1;
    if progress.failed_runs >= UPLOAD_TRIES {
        tracing::warn!(object = %o.key, runs = progress.failed_runs,
            "the multipart upload failed this many runs in a row without a part: the next run starts the object over");
        if let Some(stuck) = progress.upload_id.take() {
            // Its parts would stay on the store: asked to go, once.
            if let Err(why) = store.abort_upload(o.key, &stuck) {
                tracing::warn!(object = %o.key, upload = %stuck, error = %why,
                    "the upload given up could not be aborted: its parts may stay on the store");
            }
        }
        progress.parts.clear();
        progress.failed_runs = 0;
    }
    // The upload's own error is the one reported; the journal's is logged.
    if let Err(why) = journal.save(dir) {
        tracing::error!(error = %why, "the export journal could not be saved after a failed run");
    }
    Err(e)
}

fn send_parts<P: FnMut(u64)>(
    store: &dyn ExportStore,
    dir: &Path,
    journal: &mut Journal,
    o: &Object,
    part_bytes: u64,
    sending: &mut Sending<P>,
) -> Result<(), ExportError> {
    let progress = journal.get(o.file);
    let upload = match &progress.upload_id {
        Some(id) => id.clone(),
        None => {
            let id = store.begin_upload(o.key).map_err(store_err(o.key))?;
            progress.upload_id = Some(id.clone());
            progress.parts.clear();
            id
        }
    };
    journal.save(dir)?;
    let count = o.size_bytes.div_ceil(part_bytes) as u32;
    for number in 1..=count {
        if journal.get(o.file).parts.contains_key(&number) {
            sending.parts_resumed += 1;
            continue;
        }
        let offset_bytes = (number as u64 - 1) * part_bytes;
        let len = part_bytes.min(o.size_bytes - offset_bytes);
        sending.pace(len);
        let data = read_at(o.path, offset_bytes, len as usize)?;
        let part = Part {
            number,
            offset_bytes,
            data,
        };
        let tag = store
            .put_part(o.key, &upload, part)
            .map_err(store_err(&format!("{} part {number}", o.key)))?;
        let progress = journal.get(o.file);
        progress.parts.insert(number, tag);
        progress.failed_runs = 0;
        journal.save(dir)?;
        sending.sent(len);
    }
    let parts = &journal.get(o.file).parts;
    assert!(
        parts.keys().copied().eq(1..=count),
        "every part of {} acknowledged before the upload completes",
        o.key
    );
    let tags = parts.values().cloned().collect();
    match store.complete_upload(o.key, &upload, tags) {
        // The upload is gone, but the object may be whole: completed by a run that crashed
        // before it said so, or a completion whose answer was lost. The read-back that follows
        // checks it; an object not there (or not whole) fails the run as before.
        Err(StoreError::NotFound) if store.size(o.key).is_ok_and(|s| s == Some(o.size_bytes)) => {
            tracing::info!(object = %o.key, "the upload was already complete");
            Ok(())
        }
        r => r.map_err(store_err(o.key)),
    }
}
