//! One link's frames as DUNE's readout records them (`<SourceID>.bin`: frames back to back, no
//! header), so that DUNE's tools and `snbuf record --replay` read them. Every chunk's CRC is
//! checked as it is read; the file appears whole or not at all (written beside its name and
//! linked into place, never over an existing file).

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use snbuf_burst::{BurstReader, ReadError};

#[derive(Debug, thiserror::Error)]
pub enum ExtractError {
    #[error("{0}")]
    Read(#[from] ReadError),
    #[error("{0} exists: snbuf does not write over a file")]
    Exists(PathBuf),
    /// Nothing of the link lies in the range: an empty file would look like a success.
    #[error("link {link} has no frame with a timestamp in [{from}, {to}); nothing written")]
    Empty { link: u32, from: u64, to: u64 },
    #[error("{path}: {cause}")]
    Write {
        path: PathBuf,
        cause: std::io::Error,
    },
}

/// What was extracted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extracted {
    pub frames: u64,
    pub bytes: u64,
    pub first_timestamp: Option<u64>,
    pub last_timestamp: Option<u64>,
    /// Set when the link's file is damaged with data behind the damage (a chunk that fails its
    /// checks, a newer format, valid chunks after it): what was written is the frames before
    /// it, and this says where it ended.
    pub cut_short: Option<CutShort>,
}

/// Where a damaged link file's readable prefix ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CutShort {
    pub at_offset: u64,
    /// Chunks that look valid after it, not read.
    pub chunks_after: u64,
}

/// Writes link `link`'s frames with timestamps in `[from, to)` to `out`; none is an error, and
/// then no file is made.
pub fn extract(
    burst: &BurstReader,
    link: u32,
    out: &Path,
    from: u64,
    to: u64,
) -> Result<Extracted, ExtractError> {
    let reader = burst.link(link)?;
    if out.exists() {
        return Err(ExtractError::Exists(out.to_path_buf()));
    }
    let tmp = temp_beside(out);
    let werr = |path: &Path| {
        let path = path.to_path_buf();
        move |cause| ExtractError::Write { path, cause }
    };
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .map_err(werr(&tmp))?;
    let result = (|| {
        let mut w = BufWriter::with_capacity(1 << 20, file);
        let mut got = Extracted {
            frames: 0,
            bytes: 0,
            first_timestamp: None,
            last_timestamp: None,
            cut_short: cut_short(burst, &reader, link, to),
        };
        let fb = reader.layout.frame_bytes as usize;
        reader.frames_between(from, to, |frames: &[u8]| {
            w.write_all(frames).map_err(werr(&tmp))?;
            got.frames += (frames.len() / fb) as u64;
            got.bytes += frames.len() as u64;
            got.first_timestamp
                .get_or_insert(reader.layout.timestamp(&frames[..fb]));
            got.last_timestamp = Some(reader.layout.timestamp(&frames[frames.len() - fb..]));
            Ok::<(), ExtractError>(())
        })?;
        if got.frames == 0 {
            return Err(ExtractError::Empty { link, from, to });
        }
        let file: File = w.into_inner().map_err(|e| werr(&tmp)(e.into_error()))?;
        file.sync_all().map_err(werr(&tmp))?;
        // A hard link never replaces an existing name: whoever made `out` meanwhile keeps it.
        std::fs::hard_link(&tmp, out).map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                ExtractError::Exists(out.to_path_buf())
            } else {
                werr(out)(e)
            }
        })?;
        Ok(got)
    })();
    let _ = std::fs::remove_file(&tmp);
    result
}

/// Where link `link`'s readable prefix (`reader`) ends, if its file is damaged (a chunk that fails its
/// checks, a newer format, valid chunks after it, fewer frames than the sealed manifest says
/// were recorded) and the frames asked for, up to `to`, reach past it.
fn cut_short(
    burst: &BurstReader,
    reader: &snbuf_burst::read::LinkReader,
    link: u32,
    to: u64,
) -> Option<CutShort> {
    let report = &reader.report;
    let recorded = (burst.manifest.links.iter())
        .find(|l| l.link == link)
        .map(|l| l.data.frames);
    let damaged = matches!(
        report.end,
        snbuf_burst::scan::End::BadChunk { .. } | snbuf_burst::scan::End::FutureVersion { .. }
    ) || report.chunks_after_end > 0
        || recorded.is_some_and(|n| report.frames() < n);
    let reaches_past = report.last_timestamp().is_none_or(|last| to > last);
    (damaged && reaches_past).then_some(CutShort {
        at_offset: report.valid_bytes,
        chunks_after: report.chunks_after_end,
    })
}

/// `.<name>.part` beside `path`.
pub fn temp_beside(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.part"))
}
