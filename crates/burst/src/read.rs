//! Reading a burst's frames back, for whatever turns a burst into something else (`snbuf
//! convert`, `extract`, `inspect`): per link the valid chunks in order, found by `scan`, and each
//! payload's CRC checked again as it is read, so that nothing that changed on the medium since
//! the scan is handed on. Memory: one chunk's payload at a time.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use snbuf_frames::FrameLayout;

use crate::chunk::{ChunkHeader, HEADER_BYTES};
use crate::manifest::{link_file_name, Manifest, ManifestError};
use crate::scan::{scan, ChunkSeen, End, Expect, ScanReport};

/// Why a burst's frames cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{0}")]
    Manifest(#[from] ManifestError),
    #[error("{dir}: the manifest says nothing of its frames (frame type unknown)")]
    NoFrameType { dir: PathBuf },
    #[error("{dir} has no link {link} (links: {links})")]
    NoSuchLink {
        dir: PathBuf,
        link: u32,
        links: String,
    },
    #[error("{path}: {cause}")]
    Io {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error(transparent)]
    Coded(#[from] crate::coded_link::CodedLinkError),
    #[error("{path}: chunk {sequence} at offset {offset} changed since it was checked (CRC-32C mismatch)")]
    Changed {
        path: PathBuf,
        sequence: u64,
        offset: u64,
    },
}

/// A burst opened for reading.
pub struct BurstReader {
    pub dir: PathBuf,
    pub manifest: Manifest,
    pub layout: FrameLayout,
}

impl BurstReader {
    pub fn open(dir: &Path) -> Result<BurstReader, ReadError> {
        let manifest = Manifest::read(dir)?;
        let layout = manifest
            .frame_layout()
            .ok_or_else(|| ReadError::NoFrameType {
                dir: dir.to_path_buf(),
            })?;
        debug_assert!(
            manifest
                .frame
                .as_ref()
                .is_some_and(|f| f.frame_bytes == layout.frame_bytes),
            "the layout is the manifest's frame type"
        );
        Ok(BurstReader {
            dir: dir.to_path_buf(),
            manifest,
            layout,
        })
    }

    /// The links the manifest lists, in order.
    pub fn links(&self) -> Vec<u32> {
        self.manifest.links.iter().map(|l| l.link).collect()
    }

    /// Link `link`'s file, scanned.
    pub fn link(&self, link: u32) -> Result<LinkReader, ReadError> {
        if !self.manifest.links.iter().any(|l| l.link == link) {
            let links: Vec<String> = self.links().iter().map(|l| l.to_string()).collect();
            return Err(ReadError::NoSuchLink {
                dir: self.dir.clone(),
                link,
                links: links.join(", "),
            });
        }
        // The link file, or its coded form as an export wrote it (the file read, decoded).
        let codec = self.manifest.coded.as_deref();
        let path = match codec.is_some() {
            false => self.dir.join(link_file_name(link)),
            true => self
                .dir
                .join(link_file_name(link) + crate::coded_link::SUFFIX),
        };
        let io = |cause| ReadError::Io {
            path: path.clone(),
            cause,
        };
        let file = crate::coded_link::open_link_file(&self.dir, &link_file_name(link), codec)?;
        let step = self
            .manifest
            .frame
            .as_ref()
            .map_or(self.layout.ticks_per_frame, |f| f.step_ticks());
        let report = scan(
            &file,
            Expect {
                link: Some(link),
                frame_step_ticks: Some(step),
                frame: Some(self.layout),
            },
        )
        .map_err(io)?;
        Ok(LinkReader {
            path,
            file,
            report,
            layout: self.layout,
            frame_step_ticks: step,
        })
    }
}

/// One link's valid chunks, readable in order.
pub struct LinkReader {
    /// The file read: the link file, or in a coded copy its `.snbl` (decoded as it is opened).
    pub path: PathBuf,
    file: File,
    pub report: ScanReport,
    pub layout: FrameLayout,
    /// Ticks between the link's frames (`FrameInfo::step_ticks`).
    pub frame_step_ticks: u64,
}

impl LinkReader {
    pub fn chunks(&self) -> &[ChunkSeen] {
        &self.report.chunks
    }

    /// Where and why the valid chunks end (a torn or corrupt tail is not read).
    pub fn end(&self) -> &End {
        &self.report.end
    }

    /// Reads chunk `c`'s header and payload, checking the payload's CRC again.
    pub fn read_chunk(
        &self,
        c: &ChunkSeen,
        payload: &mut Vec<u8>,
    ) -> Result<ChunkHeader, ReadError> {
        debug_assert_eq!(
            self.report.chunks.get(c.sequence as usize),
            Some(c),
            "a chunk of this link's valid prefix"
        );
        let io = |cause| ReadError::Io {
            path: self.path.clone(),
            cause,
        };
        let mut header = [0u8; HEADER_BYTES];
        self.file.read_exact_at(&mut header, c.offset).map_err(io)?;
        let changed = || ReadError::Changed {
            path: self.path.clone(),
            sequence: c.sequence,
            offset: c.offset,
        };
        let h = ChunkHeader::decode(&header).map_err(|_| changed())?;
        payload.resize(h.payload_bytes as usize, 0);
        self.file
            .read_exact_at(payload, c.offset + h.payload_offset())
            .map_err(io)?;
        if crate::chunk::crc32c(payload) != h.payload_crc32c || h.sequence != c.sequence {
            return Err(changed());
        }
        debug_assert_eq!(
            payload.len(),
            h.payload_bytes as usize,
            "the payload read whole"
        );
        Ok(h)
    }

    /// How many frames have timestamps in `[from, to)`: from the chunk headers where a chunk
    /// lies wholly inside, reading only the chunks across an edge.
    pub fn count_between(&self, from: u64, to: u64) -> Result<u64, ReadError> {
        let mut n = 0;
        let mut payload = Vec::new();
        let fb = self.layout.frame_bytes as usize;
        for c in self.chunks() {
            if c.last_timestamp < from || c.first_timestamp >= to {
                continue;
            }
            if c.first_timestamp >= from && c.last_timestamp < to {
                n += c.frame_count as u64;
                continue;
            }
            self.read_chunk(c, &mut payload)?;
            n += payload
                .chunks_exact(fb)
                .filter(|f| (from..to).contains(&self.layout.timestamp(f)))
                .count() as u64;
        }
        Ok(n)
    }

    /// Calls `each` with the frames whose timestamps lie in `[from, to)`, a run of whole frames
    /// from one chunk at a time, in time order, every chunk's CRC checked as it is read.
    pub fn frames_between<E: From<ReadError>>(
        &self,
        from: u64,
        to: u64,
        mut each: impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let fb = self.layout.frame_bytes as usize;
        let mut payload = Vec::new();
        for c in self.chunks() {
            if c.last_timestamp < from || c.first_timestamp >= to {
                continue;
            }
            self.read_chunk(c, &mut payload)?;
            let frames: Vec<&[u8]> = payload.chunks_exact(fb).collect();
            let first = frames.partition_point(|f| self.layout.timestamp(f) < from);
            let end = frames.partition_point(|f| self.layout.timestamp(f) < to);
            if first < end {
                each(&payload[first * fb..end * fb])?;
            }
        }
        Ok(())
    }
}
