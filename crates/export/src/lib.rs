//! snbuf-export: a sealed burst to an object store, slowly and surely. Every file of the burst
//! and its manifest goes through the S3 API (multipart for files larger than a part) or into a
//! directory (`file://`), at a bounded rate so that it never starves recording.
//!
//! It is resumable: a journal in the burst directory records each completed part, so after a
//! crash or a network failure nothing already sent is sent again. It is verified: each object is
//! read back and its size and CRC-32C compared with the local file before the burst is marked
//! exported (`export.json`). The local burst is removed only on request, and only after that
//! verification. A mismatch (an object corrupted after upload) fails the export, and the next
//! run sends that object again.

#![forbid(unsafe_code)]

pub mod destination;
mod journal;
pub mod queue;
mod read_back;
mod send;
pub mod staging;

use read_back::verify_object;
pub use read_back::{read_back_again, ReadBack};

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use snbuf_persist::replace::{replace_file, ReplaceDurability};

pub use destination::{Destination, ExportStore, S3Settings};
use journal::{Journal, ObjectProgress, JOURNAL};
use send::{send_multipart, send_whole, Object, Sending};
pub use staging::ExportCodec;

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("{0}")]
    Usage(String),
    #[error("{path}: {cause}")]
    Io {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("{0}")]
    Store(String),
    #[error("object {key}: {why}; the burst is not marked exported (the next run sends it again)")]
    Verify { key: String, why: String },
}

#[derive(Clone, Debug)]
pub struct ExportOptions {
    /// Bytes per second at most (None: as fast as the store takes them).
    pub rate_bytes_per_s: Option<u64>,
    /// Part size of multipart uploads and of read-back (S3 needs at least 5 MiB).
    pub part_bytes: u64,
    pub delete_after_verify: bool,
    /// How link files are sent: as they are, or coded (`staging`).
    pub codec: ExportCodec,
}

/// The destination and options of an export as a user gives them (`export` and
/// `serve --export-to`), checked before anything runs: a mistake is `ExportError::Usage`.
pub fn options(
    url: &str,
    s3: &S3Settings,
    rate: Option<&str>,
    part_bytes: u64,
    delete_after_verify: bool,
    codec: ExportCodec,
) -> Result<(Destination, ExportOptions), ExportError> {
    let rate = rate
        .map(|r| match snbuf_quantity::parse_rate_bytes_per_s(r) {
            Ok(0) => Err(ExportError::Usage(
                "the export rate must be more than 0".into(),
            )),
            Ok(v) => Ok(v),
            Err(e) => Err(ExportError::Usage(format!("rate: {e}"))),
        })
        .transpose()?;
    let dest = Destination::parse_with(url, s3)?;
    let opts = ExportOptions {
        rate_bytes_per_s: rate,
        part_bytes,
        delete_after_verify,
        codec,
    };
    Ok((dest, opts))
}

#[derive(Clone, Debug, Serialize)]
pub struct ExportReport {
    pub burst_dir: String,
    pub destination: String,
    pub objects: Vec<ObjectRecord>,
    /// Bytes sent by this run (resumed parts are not counted again).
    pub bytes_sent: u64,
    /// Parts a previous run had already sent.
    pub parts_resumed: u64,
    pub seconds: f64,
    /// Of those, reading objects back to verify them.
    pub verify_seconds: f64,
    /// Of those, waiting for link files to be coded and checked (`--codec frames`: coded in the
    /// background while others are sent); the rest is sending, pacing included.
    pub coding_seconds: f64,
    pub deleted: bool,
}

impl ExportReport {
    /// The export in one line for people: what went where, how fast, what a run before sent.
    pub fn summary(&self) -> String {
        use snbuf_quantity::{Bytes, Rate};
        let resumed = if self.parts_resumed > 0 {
            format!(", {} part(s) already sent before", self.parts_resumed)
        } else {
            String::new()
        };
        format!(
            "exported {} objects to {}: {} sent in {:.1} s ({}){resumed}; every object read back and checked",
            self.objects.len(),
            self.destination,
            Bytes(self.bytes_sent),
            self.seconds,
            Rate(self.bytes_sent as f64 / self.seconds.max(1e-9)),
        )
    }

    /// The rate of sending alone: bytes sent over the time not spent reading back or coding.
    pub fn sending_bytes_per_s(&self) -> f64 {
        let send_s = self.seconds - self.verify_seconds - self.coding_seconds;
        self.bytes_sent as f64 / send_s.max(1e-9)
    }
}

/// The bytes of the burst's files in `dir`, following symbolic links (a link's file on another
/// output counts): what an export of it sends at most, for a progress bar.
pub fn burst_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .filter_map(|e| std::fs::metadata(e.path()).ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ObjectRecord {
    pub file: String,
    pub key: String,
    pub size_bytes: u64,
    pub crc32c: u32,
}

pub const EXPORTED: &str = "export.json";

/// A burst's export record (`export.json`), written once every object was read back and
/// matched: where it went, when, and each object.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Exported {
    pub destination: String,
    pub verified_unix_ns: u64,
    pub objects: Vec<ObjectRecord>,
}

/// When the burst in `dir` was last exported and verified (ns since the Unix epoch), if it was:
/// None without a readable export record.
pub fn exported_at(dir: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(dir.join(EXPORTED)).ok()?;
    serde_json::from_str::<Exported>(&text)
        .ok()
        .map(|e| e.verified_unix_ns)
}

/// A burst's export state in words, as `snbuf ls` and `snbuf show` say it: "yes: DESTINATION"
/// once its export record is written, "in progress" while an export's journal is there, else
/// "no".
pub fn export_state(dir: &Path) -> String {
    if let Ok(t) = std::fs::read_to_string(dir.join(EXPORTED)) {
        match serde_json::from_str::<Exported>(&t) {
            Ok(e) => format!("yes: {}", e.destination),
            Err(_) => "yes".into(),
        }
    } else if dir.join(JOURNAL).exists() {
        "in progress".into()
    } else {
        "no".into()
    }
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> ExportError + '_ {
    move |cause| ExportError::Io {
        path: path.to_path_buf(),
        cause,
    }
}

/// Replaces `dir/name` with `value` as JSON, whole or not at all (`ReplaceDurability::Atomic`),
/// not fsynced: a journal or record lost in a power cut only makes the next run send
/// again, and nothing is deleted on its strength (deletion follows a read-back).
pub(crate) fn write_json(
    dir: &Path,
    name: &str,
    value: &impl Serialize,
) -> Result<(), ExportError> {
    let path = dir.join(name);
    replace_file(
        &path,
        &serde_json::to_vec_pretty(value).expect("serialises"),
        ReplaceDurability::Atomic,
    )
    .map_err(io(&path))
}

/// Size and CRC-32C of a local file, streamed.
fn local_crc(path: &Path) -> Result<(u64, u32), ExportError> {
    let mut f = std::fs::File::open(path).map_err(io(path))?;
    let mut buf = vec![0u8; 1 << 20];
    let (mut n, mut crc) = (0u64, 0u32);
    loop {
        let k = f.read(&mut buf).map_err(io(path))?;
        if k == 0 {
            return Ok((n, crc));
        }
        crc = crc32c::crc32c_append(crc, &buf[..k]);
        n += k as u64;
    }
}

pub(crate) fn read_at(path: &Path, offset: u64, len: usize) -> Result<Vec<u8>, ExportError> {
    let mut f = std::fs::File::open(path).map_err(io(path))?;
    f.seek(SeekFrom::Start(offset)).map_err(io(path))?;
    let mut buf = vec![0u8; len];
    f.read_exact(&mut buf).map_err(io(path))?;
    Ok(buf)
}

/// The files of a burst to export: its link files, then its manifest (last, so that an object
/// store never holds a manifest whose data is not there yet).
fn burst_files(dir: &Path) -> Result<(String, Vec<String>), ExportError> {
    let m = snbuf_burst::Manifest::read(dir).map_err(|e| ExportError::Usage(e.to_string()))?;
    if m.state == snbuf_burst::BurstState::Recording {
        return Err(ExportError::Usage(format!(
            "{}: the burst is still being recorded or was never sealed; run `snbuf recover` first",
            dir.display()
        )));
    }
    if let Some(codec) = &m.coded {
        // Its link files are not here, their coded copies are: an export starts from a unit's
        // burst as recorded.
        return Err(ExportError::Usage(format!(
            "{}: a coded copy (codec {codec}) that an export made; export the burst as recorded \
             from its unit, or copy this directory as it is",
            dir.display()
        )));
    }
    // The id names the objects' directory on the store: one that could leave it (`../x`) is a
    // manifest no recorder wrote.
    snbuf_burst::check_burst_id(&m.burst_id).map_err(|e| {
        ExportError::Usage(format!("{}: the manifest's burst id: {e}", dir.display()))
    })?;
    let mut files: Vec<String> = m.links.iter().map(|l| l.file.clone()).collect();
    for f in &files {
        if f.contains('/') || f.contains("..") {
            return Err(ExportError::Usage(format!(
                "manifest names file '{f}' outside the burst"
            )));
        }
    }
    files.push("manifest.json".into());
    Ok((m.burst_id, files))
}

/// Sends `o`, whole when it fits one part, and records it sent.
fn send_object<P: FnMut(u64)>(
    store: &dyn ExportStore,
    dir: &Path,
    journal: &mut Journal,
    o: &Object,
    part_bytes: u64,
    sending: &mut Sending<P>,
) -> Result<(), ExportError> {
    if o.size_bytes <= part_bytes {
        send_whole(store, o, sending)?;
    } else {
        send_multipart(store, dir, journal, o, part_bytes, sending)?;
    }
    journal.get(o.file).uploaded = true;
    journal.save(dir)
}

/// Writes the export record of a burst whose every object was read back and matched, then, if
/// asked, removes the local copy (with the files of links on other outputs): only now may it go.
/// Whether it was removed.
fn mark_exported(
    dir: &Path,
    dest: &Destination,
    records: &[ObjectRecord],
    delete_after_verify: bool,
) -> Result<bool, ExportError> {
    let exported = Exported {
        destination: dest.describe(),
        verified_unix_ns: snbuf_quantity::now_unix_ns(),
        objects: records.to_vec(),
    };
    write_json(dir, EXPORTED, &exported)?;
    if delete_after_verify {
        snbuf_burst::outputs::remove_burst(dir).map_err(io(dir))?;
    }
    Ok(delete_after_verify)
}

/// What a read-back means for the object `o`: matched, it is exported; found wrong or missing, it
/// is no longer known to be exported (the export record goes, and the journal sends it whole
/// again); a store that did not answer says nothing of the object, which the next run reads back
/// again (the journal keeps it sent).
fn forget_unless_verified(
    dir: &Path,
    journal: &mut Journal,
    o: &Object,
    crc32c: u32,
    verified: Result<(), ExportError>,
) -> Result<(), ExportError> {
    match verified {
        Ok(()) => Ok(()),
        Err(e @ ExportError::Store(_)) => Err(e),
        Err(e) => {
            let _ = std::fs::remove_file(dir.join(EXPORTED));
            *journal.get(o.file) = ObjectProgress {
                size_bytes: o.size_bytes,
                crc32c,
                ..Default::default()
            };
            journal.save(dir)?;
            Err(e)
        }
    }
}

/// Exports the burst in `dir` to `dest`; `progress(bytes_sent)` after every part.
///
/// Read top to bottom it is the protocol: the journal, each object sent (resumed where a run
/// left it), read back and compared, the manifest last, and `export.json` only when every
/// object matched.
pub fn export_burst(
    dir: &Path,
    dest: &Destination,
    opts: &ExportOptions,
    progress: impl FnMut(u64),
) -> Result<ExportReport, ExportError> {
    let store = dest.store();
    let part = opts.part_bytes;
    if part < store.min_part_bytes() || part == 0 {
        return Err(ExportError::Usage(format!(
            "part size {part} B: {} takes parts of at least {} B",
            dest.describe(),
            store.min_part_bytes().max(1)
        )));
    }
    let (burst_id, files) = burst_files(dir)?;
    let start = Instant::now();
    let mut staged = staging::stage(dir, &files, opts.codec)?;
    let mut journal = Journal::load(dir, dest, part);
    let mut sending = Sending::new(opts.rate_bytes_per_s, progress);
    let (mut coding_s, mut verify_s) = (0.0, 0.0);
    let mut records = Vec::new();
    for i in 0..staged.len() {
        let t_coding = Instant::now();
        let s = staged.get(i)?;
        coding_s += t_coding.elapsed().as_secs_f64();
        sending.not_sending(t_coding.elapsed());
        let (size, crc) = local_crc(&s.path)?;
        let key = dest.key(&burst_id, &s.name);
        let o = Object {
            file: &s.name,
            path: &s.path,
            key: &key,
            size_bytes: size,
        };
        if !journal.object(o.file, size, crc).uploaded {
            send_object(store, dir, &mut journal, &o, part, &mut sending)?;
        }
        // Read back and compare, whatever happened before.
        let t_verify = Instant::now();
        let verified = verify_object(store, &key, size, crc, part);
        verify_s += t_verify.elapsed().as_secs_f64();
        sending.not_sending(t_verify.elapsed());
        forget_unless_verified(dir, &mut journal, &o, crc, verified)?;
        records.push(ObjectRecord {
            file: s.name.clone(),
            key,
            size_bytes: size,
            crc32c: crc,
        });
    }
    assert_eq!(
        records.len(),
        files.len(),
        "every file exported and verified"
    );
    let deleted = mark_exported(dir, dest, &records, opts.delete_after_verify)?;
    Ok(ExportReport {
        burst_dir: dir.display().to_string(),
        destination: dest.describe(),
        objects: records,
        bytes_sent: sending.sent_bytes,
        parts_resumed: sending.parts_resumed,
        seconds: start.elapsed().as_secs_f64(),
        verify_seconds: verify_s,
        coding_seconds: coding_s,
        deleted,
    })
}

/// For benchmarks only: uploads the burst's files as plain uploads with the same client and part
/// size, without journal, checksums, pacing or read-back, under keys ending in `.raw`. Returns
/// bytes and seconds: the store's own upload rate, for comparison with `export_burst`'s.
pub fn raw_upload(dir: &Path, dest: &Destination, part: u64) -> Result<(u64, f64), ExportError> {
    let store = dest.store();
    let (burst_id, files) = burst_files(dir)?;
    let start = Instant::now();
    let mut bytes = 0u64;
    let failed = |key: &str| {
        let key = key.to_string();
        move |e| ExportError::Store(format!("{key}: {e}"))
    };
    for file in &files {
        let path = dir.join(file);
        let size = std::fs::metadata(&path).map_err(io(&path))?.len();
        let key = format!("{}.raw", dest.key(&burst_id, file));
        if size <= part {
            let data = read_at(&path, 0, size as usize)?;
            store.put(&key, data).map_err(failed(&key))?;
        } else {
            let upload = store.begin_upload(&key).map_err(failed(&key))?;
            let mut tags = Vec::new();
            for number in 1..=size.div_ceil(part) as u32 {
                let offset_bytes = (number as u64 - 1) * part;
                let data = read_at(&path, offset_bytes, part.min(size - offset_bytes) as usize)?;
                let p = destination::Part {
                    number,
                    offset_bytes,
                    data,
                };
                tags.push(store.put_part(&key, &upload, p).map_err(failed(&key))?);
            }
            store
                .complete_upload(&key, &upload, tags)
                .map_err(failed(&key))?;
        }
        bytes += size;
    }
    Ok((bytes, start.elapsed().as_secs_f64()))
}

/// Whether `dest` can be reached now (a directory that exists, a bucket that answers), for a
/// clear message at start. A unit records either way; its exports are tried again later.
pub fn probe(dest: &Destination) -> Result<(), String> {
    dest.store().probe().map_err(|e| e.to_string())
}
