//! What an export sends for each file of a burst: the file as it is, or (`ExportCodec::Frames`)
//! each link file coded (`snbuf_burst::coded_link`: a third of the bytes of DUNE's ADC data)
//! and a copy of the manifest that says so. The coded files are made in the burst directory,
//! under `.export-coded/`, checked to decode to the link file before anything is sent, and
//! removed once the export is verified. Coding is deterministic: a run that resumes sends the
//! same bytes, so the parts an earlier run sent still fit.

use std::path::{Path, PathBuf};

use snbuf_burst::coded_link::{self, CODEC_NAME, SUFFIX};
use snbuf_burst::manifest::link_of_file_name;
use snbuf_burst::Manifest;
use snbuf_frames::FrameType;

use crate::{io, ExportError};

/// How an export sends a burst's link files.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ExportCodec {
    /// As they are.
    #[default]
    None,
    /// Through the frame codec, as `<file>.snbl`; the manifest sent says `coded`.
    Frames,
}

/// Where coded files are made, in the burst directory.
pub const STAGING_DIR: &str = ".export-coded";

/// One object to send: its name (the key's last part, and the export record's `file`) and the
/// local file that holds its bytes.
#[derive(Clone, Debug)]
pub struct Staged {
    pub name: String,
    pub path: PathBuf,
}

/// The objects of the burst in `dir` whose files are `files` (link files, then the manifest
/// last), as `codec` sends them.
pub fn stage(dir: &Path, files: &[String], codec: ExportCodec) -> Result<Vec<Staged>, ExportError> {
    let as_is = |f: &String| Staged {
        name: f.clone(),
        path: dir.join(f),
    };
    if codec == ExportCodec::None {
        return Ok(files.iter().map(as_is).collect());
    }
    let mut manifest = Manifest::read(dir).map_err(|e| ExportError::Usage(e.to_string()))?;
    let frame_type: FrameType = manifest
        .frame
        .as_ref()
        .and_then(|f| f.frame_type.parse().ok())
        .ok_or_else(|| {
            ExportError::Usage(format!(
                "{}: the manifest names no frame type the codec knows",
                dir.display()
            ))
        })?;
    let staging = dir.join(STAGING_DIR);
    std::fs::create_dir_all(&staging).map_err(io(&staging))?;
    let mut out = Vec::with_capacity(files.len());
    for f in files {
        if f == "manifest.json" {
            continue;
        }
        let Some(link) = link_of_file_name(f) else {
            out.push(as_is(f));
            continue;
        };
        let name = format!("{f}{SUFFIX}");
        let path = staging.join(&name);
        let coded = coded_link::encode_link_file(&dir.join(f), frame_type, link, &path)
            .map_err(|e| ExportError::Usage(e.to_string()))?;
        check_decodes(&path, coded)?;
        out.push(Staged { name, path });
    }
    manifest.coded = Some(CODEC_NAME.to_string());
    let path = staging.join("manifest.json");
    let json = serde_json::to_vec_pretty(&manifest).expect("a manifest serialises");
    std::fs::write(&path, json).map_err(io(&path))?;
    out.push(Staged {
        name: "manifest.json".into(),
        path,
    });
    debug_assert_eq!(out.len(), files.len(), "every file staged once");
    Ok(out)
}

/// The coded file at `path` decodes to the link file it was made from (its length and
/// CRC-32C): what is sent is the data, whatever the codec did.
fn check_decodes(path: &Path, coded: coded_link::Coded) -> Result<(), ExportError> {
    let mut sink = CrcSink::default();
    let len = coded_link::decode_link_file(path, &mut sink).map_err(|e| ExportError::Verify {
        key: path.display().to_string(),
        why: format!("the coded file does not decode: {e}"),
    })?;
    if (len, sink.crc) != (coded.raw_bytes, coded.raw_crc32c) {
        return Err(ExportError::Verify {
            key: path.display().to_string(),
            why: "the coded file decodes to other bytes than the link file's".into(),
        });
    }
    Ok(())
}

/// Removes what `stage` made, once the export is verified.
pub fn unstage(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir.join(STAGING_DIR));
}

/// A writer that keeps the CRC-32C of what it is given.
#[derive(Default)]
struct CrcSink {
    crc: u32,
}

impl std::io::Write for CrcSink {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.crc = crc32c::crc32c_append(self.crc, b);
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
