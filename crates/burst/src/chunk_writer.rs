//! The writer side: frames in, durable chunks out, one `ChunkWriter` per link file.
//!
//! A chunk is acknowledged (`write_chunk` returns its `ChunkAck`) only after the sink's persist
//! returned, which is the durability contract of docs/DURABILITY.md. Any error leaves the sink
//! latched failed; the writer reports it with the link, the file and the operation, and refuses
//! further chunks, so the caller marks this link's burst failed while the other links go on.

use std::path::PathBuf;

use snbuf_persist::{PersistError, Sink};
use snbuf_platform::memory::{AlignedBuf, PageSize};
use snbuf_platform::HeldMemory;
use std::sync::Arc;
use std::time::Instant;

use crate::chunk::{
    crc32c, crc32c_from_memory, stride_for, ChunkHeader, FORMAT_VERSION, HEADER_BYTES,
    MAPPED_CHUNK_ALIGN_BYTES, MAX_HEADER_BLOCK_BYTES,
};
use crate::manifest::LinkData;

#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("link {link}: {cause}")]
    Persist { link: u32, cause: PersistError },
    #[error("link {link} ({file}): the burst file is full at {offset} B (all the space reserved for the window, or all the disk had)")]
    Full {
        link: u32,
        file: PathBuf,
        offset: u64,
    },
    #[error("link {link}: {why}")]
    BadChunk { link: u32, why: String },
    #[error("link {link}: an earlier error failed this link; no more chunks are accepted")]
    Failed { link: u32 },
}

/// Proof that a chunk is durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkAck {
    pub sequence: u64,
    pub offset: u64,
    pub stride_bytes: u64,
}

#[derive(Clone, Copy, Debug)]
struct Staged {
    payload_bytes: usize,
    crc32c: u32,
    /// The payload is already where the chunk goes (written from the caller's memory); only
    /// the header is left to write. Otherwise it waits in the staging buffer (block devices).
    in_place: bool,
    /// Block devices: the payload went to the sink in whole blocks from aligned memory, which
    /// an O_DIRECT sink sends to the device as it lies (no copy by the CPU).
    from_source: bool,
    /// Its write may still be reading the caller's memory (`start_stage`) until `wait_staged`.
    awaiting_write: bool,
}

pub struct ChunkWriter<S: Sink> {
    sink: S,
    link: u32,
    frame_bytes: u32,
    align_bytes: u64,
    /// The header block: 64 B on memory, the alignment on block devices (so a payload of whole
    /// aligned blocks starts on a block of its own and can be written from where it lies).
    header_bytes: usize,
    /// Mapped memory: payload and header are persisted separately, payload first.
    mapped: bool,
    /// Block devices: the header block, and behind it the payload when it must be copied
    /// (lengths not whole blocks), so that such a chunk is still one aligned write.
    staging: Option<AlignedBuf>,
    /// The payload staged for the next chunk (`stage`), not yet appended: its length and CRC.
    staged: Option<Staged>,
    /// Acknowledged chunks: durable.
    totals: LinkData,
    /// Appended chunks, durable or not (`totals` plus those awaiting a persist).
    written: LinkData,
    /// Appended chunks whose payload went to a block device from the caller's memory.
    chunks_from_source: u64,
    /// What `start_persist` covers, until `finish_persist` makes it the acknowledged totals.
    persist_started: Option<LinkData>,
    failed: bool,
}

impl<S: Sink> ChunkWriter<S> {
    /// A writer for `link`, appending chunks of up to `max_payload_bytes` of `frame_bytes`
    /// frames from the start of the sink's region.
    pub fn new(
        sink: S,
        link: u32,
        frame_bytes: u32,
        max_payload_bytes: usize,
    ) -> Result<Self, WriteError> {
        let report = sink.report();
        let mapped = report.method.capabilities().mapped;
        // Chunks start on the medium's alignment: the direct-I/O alignment for block devices
        // (so every chunk is one aligned write), 256 B on memory.
        let align_bytes = if mapped {
            MAPPED_CHUNK_ALIGN_BYTES
        } else {
            report.alignment_bytes.max(512)
        };
        if frame_bytes == 0 {
            return Err(WriteError::BadChunk {
                link,
                why: "frames of 0 bytes".into(),
            });
        }
        let header_bytes = if mapped {
            HEADER_BYTES
        } else {
            align_bytes as usize
        };
        if header_bytes > MAX_HEADER_BLOCK_BYTES {
            return Err(WriteError::BadChunk {
                link,
                why: format!(
                    "a direct-I/O alignment of {align_bytes} B is more than a chunk's header block can take ({MAX_HEADER_BLOCK_BYTES} B)"
                ),
            });
        }
        let staging = if mapped {
            None
        } else {
            let stride = stride_for(header_bytes, max_payload_bytes, align_bytes) as usize;
            Some(
                AlignedBuf::new(stride, PageSize::Small4K).map_err(|e| WriteError::Persist {
                    link,
                    cause: PersistError::io("allocate chunk buffer for", &report.path, e),
                })?,
            )
        };
        assert!(
            header_bytes >= HEADER_BYTES && header_bytes.is_multiple_of(HEADER_BYTES),
            "a header block of whole 64 B lines, as a version 2 header declares"
        );
        Ok(ChunkWriter {
            sink,
            link,
            frame_bytes,
            align_bytes,
            header_bytes,
            mapped,
            staging,
            staged: None,
            totals: LinkData::default(),
            written: LinkData::default(),
            chunks_from_source: 0,
            persist_started: None,
            failed: false,
        })
    }

    pub fn align_bytes(&self) -> u64 {
        self.align_bytes
    }

    /// What the file holds in acknowledged chunks.
    pub fn totals(&self) -> LinkData {
        debug_assert!(self.totals.chunks <= self.written.chunks, "only appended");
        self.totals
    }

    pub fn sink(&self) -> &S {
        &self.sink
    }

    pub fn into_sink(self) -> S {
        self.sink
    }

    /// Writes whole frames as the next chunk and returns once it is durable.
    pub fn write_chunk(
        &mut self,
        first_timestamp: u64,
        last_timestamp: u64,
        payload: &[u8],
    ) -> Result<ChunkAck, WriteError> {
        let offset = self.written.file_bytes;
        let sequence = self.append_chunk(first_timestamp, last_timestamp, payload)?;
        self.persist_appended()?;
        debug_assert_eq!(self.totals.chunks, sequence + 1, "written, then durable");
        Ok(ChunkAck {
            sequence,
            offset,
            stride_bytes: self.written.file_bytes - offset,
        })
    }

    /// Writes whole frames as the next chunk, not yet durable: it counts for nothing until a
    /// `persist_appended` returns. Grouping chunks under one persist trades a later
    /// acknowledgment for fewer flushes (one fdatasync per group instead of per chunk) and, on
    /// io_uring, writes in flight together. Returns the chunk's sequence number.
    pub fn append_chunk(
        &mut self,
        first_timestamp: u64,
        last_timestamp: u64,
        payload: &[u8],
    ) -> Result<u64, WriteError> {
        self.stage(&[payload])?;
        let sequence = self.append_staged(first_timestamp, last_timestamp)?;
        debug_assert_eq!(sequence + 1, self.written.chunks, "appended last");
        Ok(sequence)
    }

    /// Places the next chunk's payload (the concatenation of `parts`, whole frames) where the
    /// chunk will be written and checksums it, without making it a chunk yet: `append_staged`
    /// does that by writing the header. Staging again first discards this payload, which is
    /// never visible to a reader (no header points at it).
    ///
    /// Where the payload goes: straight onto the mapping on memory; on block devices, written
    /// from `parts` themselves when each is whole aligned blocks (a latency buffer's slots, cut
    /// on block boundaries: the CPU never copies the payload, and O_DIRECT sends it from where it
    /// lies), else copied into the aligned staging buffer behind the header block. The checksum
    /// is taken from `parts` after the write returned (`Sink::write_in_place` no longer reads
    /// its input once it returns, io_uring included), so a caller that validates its source
    /// afterwards knows that the bytes written are the bytes checksummed.
    ///
    /// This is how a caller that must validate its source after reading it (a latency buffer
    /// read while the producer may overwrite it) persists with at most one copy: stage,
    /// validate, then append or stage again.
    pub fn stage(&mut self, parts: &[&[u8]]) -> Result<(), WriteError> {
        self.stage_with_crc(parts, None)
    }

    /// `stage`, with the payload's CRC-32C given by the caller (combined from the frames' own,
    /// `chunk::FrameCrcCombiner`) so that the payload is never read for it. The caller answers
    /// for it being the checksum of exactly these bytes: a latency buffer's frame checksums are
    /// covered by the same validation as its frames. `None`: computed here.
    pub fn stage_with_crc(
        &mut self,
        parts: &[&[u8]],
        given_crc32c: Option<u32>,
    ) -> Result<(), WriteError> {
        let staged = self.stage_parts(parts, given_crc32c, None);
        // Waited for whatever staging returned (a failed submission may have left earlier
        // parts in flight).
        let waited = self.wait_staged();
        debug_assert!(self.staged.is_none_or(|s| !s.awaiting_write), "write done");
        staged.and(waited)
    }

    /// `stage_with_crc`, returning while a sink with a queue (io_uring) may still be writing the
    /// payload from `parts`: so one thread keeps several links' writes in flight. `wait_staged`
    /// waits for it, and must return before the caller validates its source and `append_staged`.
    ///
    /// `parts` lie inside `held` (`Sink::start_in_place`: else they are written before this
    /// returns), which the sink keeps until the write is over.
    pub fn start_stage(
        &mut self,
        parts: &[&[u8]],
        given_crc32c: Option<u32>,
        held: &Arc<dyn HeldMemory>,
    ) -> Result<(), WriteError> {
        self.stage_parts(parts, given_crc32c, Some(held))
    }

    /// Waits until no write of the staged payload reads the caller's memory any more. Every
    /// write is waited for, even after an error (which fails the writer).
    pub fn wait_staged(&mut self) -> Result<(), WriteError> {
        self.wait_staged_within(None).map(drop)
    }

    /// `wait_staged`, giving up at `limit` with `Ok(false)` while the write is still in flight
    /// (`Sink::wait_in_place_within`): one thread waits on several links' devices in turn.
    pub fn wait_staged_within(&mut self, limit: Option<Instant>) -> Result<bool, WriteError> {
        let waited = self.sink.wait_in_place_within(limit);
        if matches!(waited, Ok(false)) {
            return Ok(false);
        }
        if let Some(staged) = &mut self.staged {
            staged.awaiting_write = false;
        }
        waited.map_err(|e| {
            let offset = self.written.file_bytes;
            self.fail(e, offset)
        })
    }

    /// Stages `parts`; with `held` their write may be left in flight (`start_stage`).
    fn stage_parts(
        &mut self,
        parts: &[&[u8]],
        given_crc32c: Option<u32>,
        held: Option<&Arc<dyn HeldMemory>>,
    ) -> Result<(), WriteError> {
        self.staged = None;
        if self.failed {
            return Err(WriteError::Failed { link: self.link });
        }
        let link = self.link;
        let payload_bytes: usize = parts.iter().map(|p| p.len()).sum();
        if payload_bytes == 0 || !payload_bytes.is_multiple_of(self.frame_bytes as usize) {
            return Err(WriteError::BadChunk {
                link,
                why: format!(
                    "{payload_bytes} B is not whole frames of {} B",
                    self.frame_bytes
                ),
            });
        }
        let stride = stride_for(self.header_bytes, payload_bytes, self.align_bytes) as usize;
        if let Some(staging) = &self.staging {
            if stride > staging.len() {
                return Err(WriteError::BadChunk {
                    link,
                    why: format!(
                        "{payload_bytes} B is more than the {} B a chunk holds",
                        staging.len() - self.header_bytes
                    ),
                });
            }
        }
        let offset = self.written.file_bytes;
        debug_assert!(offset.is_multiple_of(self.align_bytes), "at whole strides");
        let in_place = self.mapped
            || parts
                .iter()
                .all(|p| (p.len() as u64).is_multiple_of(self.align_bytes));
        let from_source = in_place
            && !self.mapped
            && parts
                .iter()
                .all(|p| (p.as_ptr() as u64).is_multiple_of(self.align_bytes));
        let crc32c = if in_place {
            // Memory: unfenced stores into the payload slot, fenced by `append_staged` before it
            // writes the header. Block devices: the payload's blocks, header block left for
            // `append_staged`.
            let payload_at = offset + self.header_bytes as u64;
            let written = match (given_crc32c, held) {
                (Some(crc), _) if self.mapped => {
                    self.sink.write_in_place(payload_at, parts).map(|()| crc)
                }
                // The CPU copies: the checksum comes with the copy (from its registers where
                // the method can, else from the cache it just filled).
                (None, _) if self.mapped => self.sink.write_in_place_checksummed(payload_at, parts),
                (given, Some(held)) => self
                    .sink
                    .start_in_place(payload_at, parts, held)
                    .map(|()| given.unwrap_or_else(|| crc32c_from_memory(parts))),
                (given, None) => self
                    .sink
                    .write_in_place(payload_at, parts)
                    // The device read it by DMA: the checksum reads it from DRAM.
                    .map(|()| given.unwrap_or_else(|| crc32c_from_memory(parts))),
            };
            match written {
                Ok(crc) => crc,
                Err(e) => return Err(self.fail(e, offset)),
            }
        } else {
            let staging = self
                .staging
                .as_mut()
                .expect("block writers have a staging buffer");
            let mut pos = self.header_bytes;
            for part in parts {
                staging.as_mut_slice()[pos..pos + part.len()].copy_from_slice(part);
                pos += part.len();
            }
            debug_assert_eq!(pos, self.header_bytes + payload_bytes, "copied whole");
            // From the staged copy, still in cache, rather than from the source again.
            given_crc32c.unwrap_or_else(|| crc32c(&staging.as_slice()[self.header_bytes..pos]))
        };
        self.staged = Some(Staged {
            payload_bytes,
            crc32c,
            in_place,
            from_source,
            awaiting_write: in_place && held.is_some(),
        });
        Ok(())
    }

    /// Makes the staged payload the next chunk (not yet durable, as `append_chunk`): writes its
    /// header (memory: after fencing the payload) or the whole aligned chunk (block devices).
    pub fn append_staged(
        &mut self,
        first_timestamp: u64,
        last_timestamp: u64,
    ) -> Result<u64, WriteError> {
        if self.failed {
            return Err(WriteError::Failed { link: self.link });
        }
        let link = self.link;
        let Some(staged) = self.staged.take() else {
            return Err(WriteError::BadChunk {
                link,
                why: "no payload staged".into(),
            });
        };
        if staged.awaiting_write || self.persist_started.is_some() {
            return Err(WriteError::BadChunk {
                link,
                why: "appended while its payload's write or a persist is in flight".into(),
            });
        }
        debug_assert!(staged.in_place || !self.mapped, "memory: in place");
        let stride = stride_for(self.header_bytes, staged.payload_bytes, self.align_bytes);
        let header = ChunkHeader {
            version: FORMAT_VERSION,
            header_bytes: self.header_bytes as u16,
            link,
            sequence: self.written.chunks,
            first_timestamp,
            last_timestamp,
            frame_count: (staged.payload_bytes / self.frame_bytes as usize) as u32,
            frame_bytes: self.frame_bytes,
            payload_bytes: u32::try_from(staged.payload_bytes).map_err(|_| {
                WriteError::BadChunk {
                    link,
                    why: "payload over 4 GiB".into(),
                }
            })?,
            payload_crc32c: staged.crc32c,
            stride_bytes: u32::try_from(stride).map_err(|_| WriteError::BadChunk {
                link,
                why: "chunk over 4 GiB".into(),
            })?,
        };
        // Assert before writing what the reader will check after reading.
        header.check().map_err(|e| WriteError::BadChunk {
            link,
            why: e.to_string(),
        })?;
        let offset = self.written.file_bytes;
        let result = if self.mapped {
            self.write_mapped_header(offset, &header)
        } else if staged.in_place {
            self.write_header_block(offset, &header)
        } else {
            self.write_block(offset, &header, staged.payload_bytes, stride as usize)
        };
        if let Err(e) = result {
            return Err(self.fail(e, offset));
        }
        // The sink took the chunk: it lies inside the sink's region, right after the previous
        // one, and carries the next sequence number (asserted here, checked again by `scan`).
        assert!(
            offset + stride <= self.sink.report().region_bytes,
            "chunk {} at {offset} + {stride} B outside the {} B region",
            header.sequence,
            self.sink.report().region_bytes
        );
        assert_eq!(
            header.sequence, self.written.chunks,
            "chunk sequence numbers count up by one"
        );
        let t = &mut self.written;
        t.chunks += 1;
        t.frames += header.frame_count as u64;
        t.payload_bytes += staged.payload_bytes as u64;
        t.file_bytes += stride;
        t.first_timestamp.get_or_insert(first_timestamp);
        t.last_timestamp = Some(last_timestamp);
        self.chunks_from_source += staged.from_source as u64;
        Ok(header.sequence)
    }

    /// Makes every appended chunk durable; returns how many were acknowledged by this call.
    pub fn persist_appended(&mut self) -> Result<u64, WriteError> {
        self.start_persist()?;
        let acknowledged = self.finish_persist()?;
        debug_assert_eq!(self.totals, self.written, "all durable");
        Ok(acknowledged)
    }

    /// `persist_appended` in two halves (`Sink::start_persist`): this one covers every chunk
    /// appended so far, and no chunk may be appended before `finish_persist`.
    pub fn start_persist(&mut self) -> Result<(), WriteError> {
        if self.failed {
            return Err(WriteError::Failed { link: self.link });
        }
        assert!(self.persist_started.is_none(), "start_persist twice");
        if self.written.chunks == self.totals.chunks {
            return Ok(());
        }
        if let Err(e) = self.sink.start_persist() {
            let offset = self.totals.file_bytes;
            return Err(self.fail(e, offset));
        }
        self.persist_started = Some(self.written);
        Ok(())
    }

    /// Returns once what `start_persist` covered is durable, with how many chunks that
    /// acknowledged (0 if there was nothing to persist).
    pub fn finish_persist(&mut self) -> Result<u64, WriteError> {
        self.finish_persist_within(None)
            .map(|acknowledged| acknowledged.expect("no limit: the persist is over"))
    }

    /// `finish_persist`, giving up at `limit` with `Ok(None)` while the persist is still in
    /// flight (`Sink::finish_persist_within`).
    pub fn finish_persist_within(
        &mut self,
        limit: Option<Instant>,
    ) -> Result<Option<u64>, WriteError> {
        if self.failed {
            return Err(WriteError::Failed { link: self.link });
        }
        let Some(covered) = self.persist_started else {
            return Ok(Some(0));
        };
        let over = self.sink.finish_persist_within(limit);
        if matches!(over, Ok(false)) {
            return Ok(None);
        }
        self.persist_started = None;
        if let Err(e) = over {
            let offset = self.totals.file_bytes;
            return Err(self.fail(e, offset));
        }
        debug_assert_eq!(covered, self.written, "no append meanwhile");
        let acknowledged = covered.chunks - self.totals.chunks;
        self.totals = covered;
        Ok(Some(acknowledged))
    }

    /// Chunks appended so far whose payload a block device took from the caller's memory, in
    /// whole aligned blocks (O_DIRECT: straight from there to the device).
    pub fn chunks_from_source(&self) -> u64 {
        debug_assert!(self.chunks_from_source <= self.written.chunks, "appended");
        self.chunks_from_source
    }

    /// Grows the file to `region_bytes` (`Sink::grow`): room for a window that moved out. On
    /// an error nothing was written and the file is as it was.
    pub fn grow(&mut self, region_bytes: u64) -> Result<(), PersistError> {
        self.sink.grow(region_bytes)
    }

    /// The bytes of file this link may fill.
    pub fn region_bytes(&self) -> u64 {
        debug_assert!(
            self.sink.report().region_bytes >= self.written.file_bytes,
            "the region holds every appended chunk: it never shrinks"
        );
        self.sink.report().region_bytes
    }

    /// The bytes of file the chunks appended so far take (acknowledged or not): where the next
    /// chunk goes.
    pub fn written_bytes(&self) -> u64 {
        self.written.file_bytes
    }

    /// Chunks appended but not yet acknowledged.
    pub fn pending_chunks(&self) -> u64 {
        self.written.chunks - self.totals.chunks
    }

    fn fail(&mut self, e: PersistError, offset: u64) -> WriteError {
        debug_assert!(offset.is_multiple_of(self.align_bytes), "at a chunk start");
        match e {
            // The sink refused the write before touching the medium: the file is full, and
            // every chunk appended before is still good and can be made durable.
            PersistError::OutOfRange { .. } => WriteError::Full {
                link: self.link,
                file: self.sink.report().path.clone(),
                offset,
            },
            cause => {
                self.failed = true;
                WriteError::Persist {
                    link: self.link,
                    cause,
                }
            }
        }
    }

    /// Persistent memory: the payload (staged with unfenced stores) is made durable first, and
    /// only then the header. Why: a header is what makes bytes count as a chunk. If it could
    /// become durable before its payload (stores drain in any order before a fence), a crash
    /// would leave a valid header over a partial payload: a chunk whose checksum fails, which is
    /// what media corruption looks like. With this order a crash leaves at most header-less
    /// payload bytes (a torn tail), and a failing payload checksum always means real damage. The
    /// crash test checks exactly this. Two fences per chunk, never one per frame.
    fn write_mapped_header(
        &mut self,
        offset: u64,
        header: &ChunkHeader,
    ) -> Result<(), PersistError> {
        debug_assert!(self.mapped, "memory writes the header after its payload");
        self.sink.persist()?;
        // The header is fenced by the next persist: of this chunk (write_chunk) or of its group.
        self.sink.write_at(offset, &header.encode())
    }

    /// Block devices, payload copied: one aligned write of header block, payload (already
    /// staged behind the header block) and zero padding; the persist follows (per chunk, or per
    /// group). A torn write leaves a header whose payload checksum fails, or no header at all:
    /// either way recovery ends the data there, and nothing before it was affected.
    fn write_block(
        &mut self,
        offset: u64,
        header: &ChunkHeader,
        payload_bytes: usize,
        stride: usize,
    ) -> Result<(), PersistError> {
        let hb = self.header_bytes;
        debug_assert_eq!(header.stride_bytes as usize, stride, "its stride");
        debug_assert!(hb + payload_bytes <= stride, "fits its stride");
        let buf = &mut header_block(self.staging.as_mut(), hb, header)[..stride];
        buf[hb + payload_bytes..].fill(0);
        self.sink.write_at(offset, buf)
    }

    /// Block devices, payload written in place (whole blocks, no padding): the header block
    /// alone, after the payload. The two writes reach the medium in either order before the
    /// persist; a crash between leaves no header (payload bytes nobody points at: a torn tail)
    /// or a header over a payload whose checksum fails (a torn chunk), never a chunk that
    /// verifies with bytes other than those checksummed.
    fn write_header_block(
        &mut self,
        offset: u64,
        header: &ChunkHeader,
    ) -> Result<(), PersistError> {
        let hb = self.header_bytes;
        debug_assert_eq!(header.header_bytes as usize, hb, "its block");
        let buf = &header_block(self.staging.as_mut(), hb, header)[..hb];
        self.sink.write_at(offset, buf)
    }
}

/// The block writer's staging buffer with its header block filled in: `header`, then zeros to
/// `header_bytes`.
fn header_block<'a>(
    staging: Option<&'a mut AlignedBuf>,
    header_bytes: usize,
    header: &ChunkHeader,
) -> &'a mut [u8] {
    let buf = staging
        .expect("block writers have a staging buffer")
        .as_mut_slice();
    debug_assert!(header_bytes <= buf.len(), "inside the buffer");
    buf[..HEADER_BYTES].copy_from_slice(&header.encode());
    buf[HEADER_BYTES..header_bytes].fill(0);
    buf
}
