//! `snbuf inspect`: a burst chunk by chunk, each read again and its CRC checked now, and with
//! `frames` each frame's header fields (timestamp, sequence number, identity) as the frame
//! layout reads them. The result is a type (`Inspection`, `inspect --json`'s schema): the
//! command line prints it, a program reads it back.

use serde::{Deserialize, Serialize};
use snbuf_burst::manifest::LinkIdentity;
use snbuf_burst::{BurstReader, End, Manifest, ReadError};
use snbuf_quantity::Bytes;

/// What to look at.
#[derive(Clone, Copy, Debug, Default)]
pub struct InspectOptions {
    /// One link (default: every link).
    pub link: Option<u32>,
    /// One chunk, by sequence number (default: every chunk).
    pub chunk: Option<u64>,
    /// Each frame's header fields.
    pub frames: bool,
    /// With `frames`: each frame's first 64 bytes in hex.
    pub hex: bool,
}

/// A burst as inspected: its manifest, and per link what its file holds.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Inspection {
    pub manifest: Manifest,
    pub links: Vec<InspectedLink>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct InspectedLink {
    pub link: u32,
    pub file: String,
    pub identity: Option<LinkIdentity>,
    /// Frames the manifest counts lost for the link.
    #[serde(default)]
    pub lost_frames: u64,
    /// Frames in the link's valid chunks.
    #[serde(default)]
    pub frames: u64,
    /// Chunks in the link's valid prefix (all of them, whichever `chunks` lists).
    #[serde(default)]
    pub valid_chunks: u64,
    /// Where and why its valid chunks end, as `scan` found it, in words.
    pub end: String,
    pub chunks: Vec<InspectedChunk>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InspectedChunk {
    pub sequence: u64,
    pub offset: u64,
    pub first_timestamp: u64,
    pub last_timestamp: u64,
    pub frame_count: u32,
    pub payload_bytes: u32,
    pub stride_bytes: u32,
    /// `ok`: the payload read now matches its CRC; `BAD`: it does not.
    pub crc: String,
    /// With `frames` (and a good CRC): each frame's header fields.
    pub frames: Option<Vec<InspectedFrame>>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InspectedFrame {
    pub frame: usize,
    pub timestamp: u64,
    pub seq_id: Option<u64>,
    pub det_id: Option<u8>,
    pub crate_id: Option<u16>,
    pub slot_id: Option<u8>,
    pub stream_id: Option<u8>,
    pub hex: Option<String>,
}

/// Reads `burst` as `opts` asks. A chunk whose payload no longer matches its CRC is listed
/// `BAD`; any other failure to read is an error.
pub fn inspect(burst: &BurstReader, opts: InspectOptions) -> Result<Inspection, ReadError> {
    let links = match opts.link {
        Some(l) => vec![l],
        None => burst.links(),
    };
    let links = links
        .into_iter()
        .map(|link| inspect_link(burst, link, opts))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Inspection {
        manifest: burst.manifest.clone(),
        links,
    })
}

fn inspect_link(
    burst: &BurstReader,
    link: u32,
    opts: InspectOptions,
) -> Result<InspectedLink, ReadError> {
    let reader = burst.link(link)?;
    let record = burst.manifest.links.iter().find(|l| l.link == link);
    let layout = burst.layout;
    let mut payload = Vec::new();
    let mut chunks = Vec::new();
    for c in reader
        .chunks()
        .iter()
        .filter(|c| opts.chunk.is_none_or(|k| c.sequence == k))
    {
        // Read again, so that the CRC shown is the one checked now.
        let crc = match reader.read_chunk(c, &mut payload) {
            Ok(_) => "ok",
            Err(ReadError::Changed { .. }) => "BAD",
            Err(e) => return Err(e),
        };
        let frames = (opts.frames && crc == "ok").then(|| {
            payload
                .chunks_exact(layout.frame_bytes as usize)
                .enumerate()
                .map(|(k, f)| {
                    let id = layout.identity(f);
                    InspectedFrame {
                        frame: k,
                        timestamp: layout.timestamp(f),
                        seq_id: layout.sequence(f),
                        det_id: id.map(|i| i.det_id),
                        crate_id: id.map(|i| i.crate_id),
                        slot_id: id.map(|i| i.slot_id),
                        stream_id: id.map(|i| i.stream_id),
                        hex: opts.hex.then(|| hex(&f[..f.len().min(64)])),
                    }
                })
                .collect::<Vec<_>>()
        });
        if let Some(f) = &frames {
            assert_eq!(
                f.len() as u64,
                u64::from(c.frame_count),
                "a chunk's frames are whole"
            );
        }
        chunks.push(InspectedChunk {
            sequence: c.sequence,
            offset: c.offset,
            first_timestamp: c.first_timestamp,
            last_timestamp: c.last_timestamp,
            frame_count: c.frame_count,
            payload_bytes: c.payload_bytes,
            stride_bytes: c.stride_bytes,
            crc: crc.into(),
            frames: opts.frames.then(|| frames.unwrap_or_default()),
        });
    }
    Ok(InspectedLink {
        link,
        file: reader.path.display().to_string(),
        identity: record.and_then(|r| r.identity),
        lost_frames: record.map_or(0, |r| r.lost_frames),
        frames: reader.report.frames(),
        valid_chunks: reader.chunks().len() as u64,
        end: end_in_words(reader.end()),
        chunks,
    })
}

/// How a link's valid chunks end, in words.
fn end_in_words(end: &End) -> String {
    match end {
        End::Clean { zero_tail_bytes } if *zero_tail_bytes > 0 => {
            format!("clean ({} of zeros after)", Bytes(*zero_tail_bytes))
        }
        End::Clean { .. } => "clean".into(),
        other => format!("{other:?}"),
    }
}

/// Bytes as two hex digits each, space apart.
fn hex(b: &[u8]) -> String {
    b.iter()
        .map(|x| format!("{x:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}
