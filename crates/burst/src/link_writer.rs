//! A whole burst being written: its directory, one chunk writer per link, and the manifest.
//!
//! The manifest is written `recording` when the burst starts and `sealed` (or `failed`) at the
//! end, atomically both times. A link whose write or fsync fails is marked failed in the
//! manifest with the error (link, operation, file); it accepts no more chunks, and the other
//! links go on. This is what the recorder drives; tests drive it with simulated media.

use std::path::{Path, PathBuf};

use snbuf_persist::Sink;

use crate::chunk_writer::{ChunkAck, ChunkWriter, WriteError};
use crate::manifest::{
    link_file_name, AnsweredTrigger, BurstState, LinkData, LinkRecord, LinkState, Manifest, Window,
    MANIFEST_FORMAT, MANIFEST_VERSION,
};
use crate::spec::{BurstError, BurstSpec};

/// One link of a burst: its chunk writer and its manifest record. Writer threads own these.
pub struct LinkWriter<S: Sink> {
    writer: Option<ChunkWriter<S>>,
    record: LinkRecord,
    /// Its device stopped answering (a call that never returned): the seal does not touch its
    /// file, which could hang the sealing thread as it hung the writer.
    abandoned: bool,
    /// The directory the link's file was opened in (a preparation's hidden name) and the
    /// burst's own: errors from the sink name the first, the manifest must name the second.
    opened_in: String,
    dir: String,
}

pub struct BurstWriter<S: Sink> {
    dir: PathBuf,
    manifest: Manifest,
    links: Vec<LinkWriter<S>>,
    /// The lock that says this burst is being recorded (`recording_lock`), until sealed.
    recording: Option<std::fs::File>,
}

/// A burst whose links were handed out with `split`; `seal` takes them back.
pub struct BurstSeal {
    dir: PathBuf,
    manifest: Manifest,
    recording: Option<std::fs::File>,
}

impl<S: Sink> BurstWriter<S> {
    /// The burst `spec` in `dir` (which holds the manifest and the links' files, or symbolic
    /// links to them), with its links' writers, in `spec.links` order: writes the manifest
    /// `recording` in `manifest_in`, the directory that becomes `dir` (under its prepared name,
    /// before it takes the burst's). Per link: the directory its file was opened in and the one it is in now
    /// (errors name the second), and its file's path when it lives on another output.
    pub(crate) fn from_writers(
        opened_in: Vec<(String, String)>,
        (dir, manifest_in): (&Path, &Path),
        spec: BurstSpec,
        writers: Vec<ChunkWriter<S>>,
        elsewhere: Vec<Option<String>>,
        recording: Option<std::fs::File>,
    ) -> Result<Self, BurstError> {
        assert_eq!(writers.len(), spec.links.len(), "a writer per link");
        assert_eq!(opened_in.len(), spec.links.len());
        assert_eq!(elsewhere.len(), spec.links.len());
        assert!(
            writers.iter().all(|w| w.totals() == LinkData::default()),
            "a burst starts from writers that wrote nothing"
        );
        // What a persist achieves here (`fdatasync`, `map_sync`, `volatile`, …), as the sinks
        // themselves report it: the manifest states it from the start. Over several outputs,
        // the weakest: one in RAM only makes the burst not survive a power cut.
        let durability = writers
            .iter()
            .map(|w| w.sink().report().durability)
            .find(|d| !d.survives_power_loss())
            .or_else(|| writers.last().map(|w| w.sink().report().durability))
            .map(|d| d.name().to_string())
            .unwrap_or_else(|| "unknown".into());
        let links: Vec<LinkWriter<S>> = spec
            .links
            .iter()
            .zip(writers)
            .zip(opened_in.into_iter().zip(elsewhere))
            .enumerate()
            .map(
                |(i, ((&link, writer), ((opened_in, now_in), path)))| LinkWriter {
                    writer: Some(writer),
                    record: LinkRecord {
                        file: link_file_name(link),
                        identity: spec.identities.get(i).copied(),
                        path,
                        ..LinkRecord::empty(link)
                    },
                    abandoned: false,
                    opened_in,
                    dir: now_in,
                },
            )
            .collect();
        let answered = spec
            .trigger
            .as_ref()
            .map(|w| vec![AnsweredTrigger::whole(&spec.burst_id, w)])
            .unwrap_or_default();
        let manifest = Manifest {
            format: MANIFEST_FORMAT.into(),
            format_version: MANIFEST_VERSION,
            burst_id: spec.burst_id,
            state: BurstState::Recording,
            created_unix_ns: snbuf_quantity::now_unix_ns(),
            sealed_unix_ns: None,
            trigger: spec.trigger,
            frame: Some(spec.frame),
            method: spec.method,
            durability,
            links: links.iter().map(|l| l.record.clone()).collect(),
            recovery: None,
            run_number: spec.run_number,
            unit: spec.unit,
            verified: None,
            triggers: answered,
            continues: None,
            continued_in: None,
            coded: None,
            injected_faults: spec.injected_faults,
        };
        assert_eq!(
            manifest.links.len(),
            links.len(),
            "the manifest lists every link"
        );
        manifest.write_as_recorded(manifest_in)?;
        Ok(BurstWriter {
            dir: dir.to_path_buf(),
            manifest,
            links,
            recording,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Appends a durable chunk to link slot `index` (the order of `BurstSpec::links`). On an
    /// error the link is failed for the rest of the burst, and the error is returned.
    pub fn write_chunk(
        &mut self,
        index: usize,
        first_timestamp: u64,
        last_timestamp: u64,
        frames: &[u8],
    ) -> Result<ChunkAck, WriteError> {
        self.links[index].write_chunk(first_timestamp, last_timestamp, frames)
    }

    /// Counts frames of the window link slot `index` could not record.
    pub fn add_lost_frames(&mut self, index: usize, frames: u64) {
        self.links[index].add_lost_frames(frames);
    }

    pub fn link_failed(&self, index: usize) -> bool {
        self.links[index].failed()
    }

    /// Hands the links out (to writer threads); `BurstSeal::seal` takes them back.
    pub fn split(self) -> (BurstSeal, Vec<LinkWriter<S>>) {
        debug_assert_eq!(
            self.manifest.links.len(),
            self.links.len(),
            "a manifest record per link"
        );
        (
            BurstSeal {
                dir: self.dir,
                manifest: self.manifest,
                recording: self.recording,
            },
            self.links,
        )
    }

    /// Finishes the burst: see `BurstSeal::seal`.
    pub fn seal(self) -> Result<Manifest, BurstError> {
        let (seal, links) = self.split();
        seal.seal(links)
    }
}

impl<S: Sink> LinkWriter<S> {
    pub fn link(&self) -> u32 {
        self.record.link
    }

    /// The link as it stands, without its sink: what a seal needs of a link whose writer can
    /// no longer be waited for (stuck in the kernel). Its record counts what was acknowledged.
    pub fn without_sink(&self) -> LinkWriter<S> {
        LinkWriter {
            writer: None,
            record: self.record.clone(),
            abandoned: self.abandoned,
            opened_in: self.opened_in.clone(),
            dir: self.dir.clone(),
        }
    }

    /// Fails the link with `e` because its device stopped answering in a call that never
    /// returned: the seal leaves its file as it is (its tail is not trimmed, nothing is synced),
    /// since touching it could hang the seal as it hung the writer.
    pub fn abandon(&mut self, e: &WriteError) {
        self.fail(e);
        self.abandoned = true;
    }

    /// Whether `abandon` was called.
    pub fn abandoned(&self) -> bool {
        debug_assert!(
            !self.abandoned || self.failed(),
            "only a failed link is abandoned"
        );
        self.abandoned
    }

    pub fn record(&self) -> &LinkRecord {
        &self.record
    }

    pub fn failed(&self) -> bool {
        debug_assert!(
            self.record.state == LinkState::Ok || self.writer.is_none(),
            "a failed link has no writer"
        );
        self.record.state == LinkState::Failed
    }

    /// Appends a durable chunk. On an error that touched the medium the link is failed for the
    /// rest of the burst (its writer and latched sink are dropped), and the error is returned.
    pub fn write_chunk(
        &mut self,
        first_timestamp: u64,
        last_timestamp: u64,
        frames: &[u8],
    ) -> Result<ChunkAck, WriteError> {
        let ack = self.with_writer(|w| w.write_chunk(first_timestamp, last_timestamp, frames))?;
        debug_assert!(
            self.record.data.chunks == ack.sequence + 1
                && self.record.data.file_bytes == ack.offset + ack.stride_bytes,
            "the manifest record counts the chunk written"
        );
        Ok(ack)
    }

    /// Appends a chunk that becomes durable (and counts in the manifest) at the next `persist`.
    pub fn append_chunk(
        &mut self,
        first_timestamp: u64,
        last_timestamp: u64,
        frames: &[u8],
    ) -> Result<u64, WriteError> {
        let sequence =
            self.with_writer(|w| w.append_chunk(first_timestamp, last_timestamp, frames))?;
        debug_assert!(
            self.record.data.chunks <= sequence,
            "an appended chunk counts once it is durable"
        );
        Ok(sequence)
    }

    /// Stages the next chunk's payload without appending it (see `ChunkWriter::stage`).
    pub fn stage(&mut self, parts: &[&[u8]]) -> Result<(), WriteError> {
        self.with_writer(|w| w.stage(parts))
    }

    /// `stage` with the payload's CRC-32C known (`ChunkWriter::stage_with_crc`).
    pub fn stage_with_crc(&mut self, parts: &[&[u8]], crc32c: u32) -> Result<(), WriteError> {
        self.with_writer(|w| w.stage_with_crc(parts, Some(crc32c)))
    }

    /// `stage_with_crc` (or `stage` for None) leaving the payload's write in flight on a sink
    /// with a queue, from `parts` inside `held`, until `wait_staged`
    /// (`ChunkWriter::start_stage`).
    pub fn start_stage(
        &mut self,
        parts: &[&[u8]],
        crc32c: Option<u32>,
        held: &std::sync::Arc<dyn snbuf_platform::HeldMemory>,
    ) -> Result<(), WriteError> {
        self.with_writer(|w| w.start_stage(parts, crc32c, held))
    }

    /// Waits until nothing reads the memory given to `start_stage` (a failed link: nothing did).
    pub fn wait_staged(&mut self) -> Result<(), WriteError> {
        if self.writer.is_none() {
            return Ok(());
        }
        self.with_writer(|w| w.wait_staged())
    }

    /// `wait_staged`, giving up at `limit` with `Ok(false)` while the write is in flight.
    pub fn wait_staged_within(
        &mut self,
        limit: Option<std::time::Instant>,
    ) -> Result<bool, WriteError> {
        if self.writer.is_none() {
            return Ok(true);
        }
        self.with_writer(|w| w.wait_staged_within(limit))
    }

    /// Appends the staged payload as a chunk that becomes durable at the next `persist`.
    pub fn append_staged(
        &mut self,
        first_timestamp: u64,
        last_timestamp: u64,
    ) -> Result<u64, WriteError> {
        let sequence = self.with_writer(|w| w.append_staged(first_timestamp, last_timestamp))?;
        debug_assert!(
            self.record.data.chunks <= sequence,
            "an appended chunk counts once it is durable"
        );
        Ok(sequence)
    }

    /// Makes every appended chunk durable; returns how many this acknowledged.
    pub fn persist(&mut self) -> Result<u64, WriteError> {
        let acknowledged = self.with_writer(|w| w.persist_appended())?;
        debug_assert_eq!(self.pending_chunks(), 0, "every appended chunk is durable");
        Ok(acknowledged)
    }

    /// `persist` in two halves, so one thread can have several links' flushes in flight
    /// (`ChunkWriter::start_persist`); nothing is appended between them.
    pub fn start_persist(&mut self) -> Result<(), WriteError> {
        self.with_writer(|w| w.start_persist())
    }

    /// Returns once what `start_persist` covered is durable, with how many chunks it
    /// acknowledged.
    pub fn finish_persist(&mut self) -> Result<u64, WriteError> {
        self.with_writer(|w| w.finish_persist())
    }

    /// `finish_persist`, giving up at `limit` with `Ok(None)` while the persist is in flight.
    pub fn finish_persist_within(
        &mut self,
        limit: Option<std::time::Instant>,
    ) -> Result<Option<u64>, WriteError> {
        self.with_writer(|w| w.finish_persist_within(limit))
    }

    /// Chunks whose payload went to a block device from the caller's memory (`ChunkWriter`).
    pub fn chunks_from_source(&self) -> u64 {
        self.writer
            .as_ref()
            .map(|w| w.chunks_from_source())
            .unwrap_or(0)
    }

    /// Grows this link's file to `region_bytes` (`Sink::grow`); whatever the answer, the link
    /// goes on as it was (a link that cannot grow fails "full" when it gets there).
    pub fn grow(&mut self, region_bytes: u64) -> Result<(), snbuf_persist::PersistError> {
        match self.writer.as_mut() {
            Some(w) if w.region_bytes() < region_bytes => w.grow(region_bytes),
            _ => Ok(()),
        }
    }

    /// The bytes of file this link may fill now (0 once failed).
    pub fn region_bytes(&self) -> u64 {
        let region_bytes = self.writer.as_ref().map_or(0, |w| w.region_bytes());
        debug_assert!(
            self.writer.is_none() || region_bytes >= self.record.data.file_bytes,
            "the file holds every acknowledged chunk"
        );
        region_bytes
    }

    /// The bytes of file its chunks take so far, acknowledged or not (0 once failed).
    pub fn written_bytes(&self) -> u64 {
        self.writer.as_ref().map_or(0, |w| w.written_bytes())
    }

    /// Chunks appended but not yet acknowledged.
    pub fn pending_chunks(&self) -> u64 {
        self.writer
            .as_ref()
            .map(|w| w.pending_chunks())
            .unwrap_or(0)
    }

    /// Runs `op` on the chunk writer; keeps the manifest record equal to the acknowledged chunks,
    /// and fails the link on any error that touched the medium.
    fn with_writer<T>(
        &mut self,
        op: impl FnOnce(&mut ChunkWriter<S>) -> Result<T, WriteError>,
    ) -> Result<T, WriteError> {
        let link = self.record.link;
        let Some(writer) = self.writer.as_mut() else {
            return Err(WriteError::Failed { link });
        };
        match op(writer) {
            Ok(v) => {
                self.record.data = writer.totals();
                let d = &self.record.data;
                debug_assert!(
                    d.payload_bytes <= d.file_bytes && (d.chunks == 0) == (d.file_bytes == 0),
                    "the record counts whole chunks: {d:?}"
                );
                Ok(v)
            }
            // A malformed chunk is the caller's mistake, and a full file a chunk that does not
            // fit: both refused before anything was written. The link stays good, so that the
            // caller can still persist what it appended before (then `fail` it, when full).
            Err(e @ (WriteError::BadChunk { .. } | WriteError::Full { .. })) => Err(e),
            Err(e) => {
                self.fail(&e);
                Err(e)
            }
        }
    }

    /// Fails the link for the rest of the burst with `e` as its error in the manifest (its
    /// writer and latched sink are dropped; chunks not yet persisted are not acknowledged).
    pub fn fail(&mut self, e: &WriteError) {
        self.record.state = LinkState::Failed;
        self.record.error = Some(e.to_string().replace(&self.opened_in, &self.dir));
        self.writer = None;
    }

    /// Counts frames of the window this link could not record.
    pub fn add_lost_frames(&mut self, frames: u64) {
        self.record.lost_frames += frames;
    }
}

impl BurstSeal {
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The burst's window moved out and more triggers joined it: the manifest says so at once
    /// (written again, atomically), so a burst recovered after a crash still names every
    /// trigger it took and the window it was recording.
    pub fn answer(
        &mut self,
        window: Window,
        triggers: Vec<AnsweredTrigger>,
    ) -> Result<(), BurstError> {
        debug_assert_eq!(
            self.manifest.state,
            BurstState::Recording,
            "only a burst being recorded takes more triggers"
        );
        self.set_answered(window, triggers);
        Ok(self.manifest.write_as_recorded(&self.dir)?)
    }

    /// The burst continues `previous` (`Manifest::continues`): written with the manifest's
    /// next write.
    pub fn set_continues(&mut self, previous: Option<String>) {
        assert!(
            previous.as_deref() != Some(self.manifest.burst_id.as_str()),
            "a burst continues no burst of its own name"
        );
        self.manifest.continues = previous;
    }

    /// The burst is continued in `next` (`Manifest::continued_in`; None: in none, e.g. after
    /// a cancel): written with the manifest's next write.
    pub fn set_continued_in(&mut self, next: Option<String>) {
        assert!(
            next.as_deref() != Some(self.manifest.burst_id.as_str()),
            "a burst is continued in no burst of its own name"
        );
        self.manifest.continued_in = next;
    }

    /// `answer` without writing the manifest now: `seal` writes it.
    pub fn set_answered(&mut self, window: Window, triggers: Vec<AnsweredTrigger>) {
        assert!(
            window.window_start_timestamp <= window.window_end_timestamp,
            "a window ends after it starts"
        );
        self.manifest.trigger = Some(window);
        self.manifest.triggers = triggers;
    }

    /// Finishes the burst: closes every link, trims each file to the bytes in use, and writes
    /// the manifest `sealed`, or `failed` if any link failed.
    pub fn seal<S: Sink>(mut self, mut links: Vec<LinkWriter<S>>) -> Result<Manifest, BurstError> {
        assert_eq!(
            links.len(),
            self.manifest.links.len(),
            "every link of the burst comes back to be sealed"
        );
        assert_eq!(
            self.manifest.state,
            BurstState::Recording,
            "a burst is sealed once"
        );
        links.sort_by_key(|l| l.record.link);
        for slot in &mut links {
            slot.writer = None;
            if slot.abandoned {
                continue;
            }
            let path = self.dir.join(&slot.record.file);
            // Trim the preallocated tail so the file is exactly its chunks. Files that are not on
            // disk (simulated media) have nothing to trim.
            if let Ok(f) = std::fs::OpenOptions::new().write(true).open(&path) {
                if f.metadata()
                    .map(|m| m.len() > slot.record.data.file_bytes)
                    .unwrap_or(false)
                {
                    f.set_len(slot.record.data.file_bytes)
                        .and_then(|_| f.sync_all())
                        .map_err(|cause| BurstError::Dir {
                            path: path.clone(),
                            cause,
                        })?;
                }
            }
        }
        let failed = links.iter().any(|l| l.failed());
        self.manifest.links = links.iter().map(|l| l.record.clone()).collect();
        // What the manifest says of each link is what its writer acknowledged: a file of
        // whole chunks, frames only where there are chunks, timestamps in order.
        for l in &self.manifest.links {
            let d = &l.data;
            assert!(
                d.chunks > 0 || (d.frames == 0 && d.payload_bytes == 0),
                "link {}: {d:?}",
                l.link
            );
            assert!(d.payload_bytes <= d.file_bytes, "link {}: {d:?}", l.link);
            assert!(
                d.first_timestamp <= d.last_timestamp,
                "link {}: {d:?}",
                l.link
            );
        }
        self.manifest.state = if failed {
            BurstState::Failed
        } else {
            BurstState::Sealed
        };
        self.manifest.sealed_unix_ns = Some(snbuf_quantity::now_unix_ns());
        self.manifest.write_as_recorded(&self.dir)?;
        // Sealed: no longer being recorded. (A seal that fails drops the lock with this value:
        // the burst, still `recording`, is recovered at the unit's next start.)
        drop(self.recording.take());
        Ok(self.manifest)
    }
}
