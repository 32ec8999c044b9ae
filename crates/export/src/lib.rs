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
pub mod queue;
mod read_back;
pub mod staging;

use read_back::verify_object;
pub use read_back::{read_back_again, ReadBack};

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use snbuf_persist::replace::{replace_file, ReplaceDurability};

pub use destination::{Destination, S3Settings};
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

pub const MIN_PART_BYTES: u64 = 5 << 20;

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

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ObjectRecord {
    pub file: String,
    pub key: String,
    pub size_bytes: u64,
    pub crc32c: u32,
}

/// Progress of one object, kept in the journal across runs.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct ObjectProgress {
    size_bytes: u64,
    crc32c: u32,
    /// S3 multipart: the upload and its completed parts (number → ETag).
    upload_id: Option<String>,
    parts: BTreeMap<u32, String>,
    /// file://: bytes written so far.
    bytes_done: u64,
    uploaded: bool,
    /// S3 multipart: runs in a row that failed on this upload without adding a part. At
    /// `UPLOAD_TRIES` the upload is started over: a store can drop an upload (the S3 client
    /// aborts one when a part is answered with an error; Garage then answered NoSuchUpload to
    /// every part, then closed the connection before reading one), and a run that resumed it
    /// for ever would never export the burst. A run that added a part was not stuck: the count
    /// starts again.
    #[serde(default)]
    failed_runs: u32,
}

/// Runs in a row that may fail on one multipart upload before it is started over.
const UPLOAD_TRIES: u32 = 3;

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Journal {
    destination: String,
    part_bytes: u64,
    objects: BTreeMap<String, ObjectProgress>,
}

const JOURNAL: &str = ".export-journal.json";
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
fn write_json(dir: &Path, name: &str, value: &impl Serialize) -> Result<(), ExportError> {
    let path = dir.join(name);
    replace_file(
        &path,
        &serde_json::to_vec_pretty(value).expect("serialises"),
        ReplaceDurability::Atomic,
    )
    .map_err(io(&path))
}

fn save_journal(dir: &Path, j: &Journal) -> Result<(), ExportError> {
    write_json(dir, JOURNAL, j)
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

fn read_at(path: &Path, offset: u64, len: usize) -> Result<Vec<u8>, ExportError> {
    let mut f = std::fs::File::open(path).map_err(io(path))?;
    f.seek(SeekFrom::Start(offset)).map_err(io(path))?;
    let mut buf = vec![0u8; len];
    f.read_exact(&mut buf).map_err(io(path))?;
    Ok(buf)
}

/// Sleeps until `sent` bytes are due at `rate` since `start` (called before sending them).
async fn pace(rate: Option<u64>, start: Instant, sent: u64) {
    if let Some(r) = rate {
        let due = Duration::from_secs_f64(sent as f64 / r as f64);
        if let Some(wait) = due.checked_sub(start.elapsed()) {
            tokio::time::sleep(wait).await;
        }
    }
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

/// Longest an object store may take to answer one request (a 16 MiB part included): past it the
/// export fails (the journal keeps what was done) instead of hanging.
const REQUEST_DEADLINE: Duration = Duration::from_secs(120);

async fn deadline<T>(
    what: &str,
    f: impl std::future::Future<Output = Result<T, s3::error::S3Error>>,
) -> Result<T, ExportError> {
    match tokio::time::timeout(REQUEST_DEADLINE, f).await {
        Ok(r) => r.map_err(|e| ExportError::Store(format!("{what}: {e}"))),
        Err(_) => Err(ExportError::Store(format!(
            "{what}: the store did not answer within {} s",
            REQUEST_DEADLINE.as_secs()
        ))),
    }
}

fn check_status(what: &str, code: u16) -> Result<(), ExportError> {
    if code >= 300 {
        Err(ExportError::Store(format!(
            "{what}: the store answered HTTP {code}"
        )))
    } else {
        Ok(())
    }
}

/// Exports the burst in `dir` to `dest`; `progress(bytes_sent)` after every part.
///
/// One piece: the export's order is its guarantee (journal, each part, read back, manifest last,
/// export.json only when every object matches); read top to bottom it is the protocol.
pub fn export_burst(
    dir: &Path,
    dest: &Destination,
    opts: &ExportOptions,
    mut progress: impl FnMut(u64),
) -> Result<ExportReport, ExportError> {
    if matches!(dest, Destination::S3 { .. }) && opts.part_bytes < MIN_PART_BYTES {
        return Err(ExportError::Usage(format!(
            "part size {} B: the S3 API needs at least 5 MiB",
            opts.part_bytes
        )));
    }
    let (burst_id, files) = burst_files(dir)?;
    let start = Instant::now();
    let mut staged = staging::stage(dir, &files, opts.codec)?;
    let mut coding_s = 0.0;
    let mut journal: Journal = std::fs::read(dir.join(JOURNAL))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .filter(|j: &Journal| j.destination == dest.describe() && j.part_bytes == opts.part_bytes)
        .unwrap_or_else(|| Journal {
            destination: dest.describe(),
            part_bytes: opts.part_bytes,
            objects: BTreeMap::new(),
        });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(io(dir))?;
    let mut sent = 0u64;
    let mut resumed = 0u64;
    let mut verify_s = 0.0;
    // The rate applies to sending: time spent coding or reading objects back does not count
    // towards it.
    let mut paced_since = Instant::now();
    let mut records = Vec::new();
    let part = opts.part_bytes;
    rt.block_on(async {
        for i in 0..staged.len() {
            let t_coding = Instant::now();
            let s = staged.get(i)?;
            coding_s += t_coding.elapsed().as_secs_f64();
            paced_since += t_coding.elapsed();
            let (file, path) = (&s.name, &s.path);
            let (size, crc) = local_crc(path)?;
            let key = dest.key(&burst_id, file);
            let entry = journal.objects.entry(file.clone()).or_default();
            if entry.size_bytes != size || entry.crc32c != crc {
                // A file that changed (or a first run): start this object over.
                *entry = ObjectProgress {
                    size_bytes: size,
                    crc32c: crc,
                    ..Default::default()
                };
            }
            if !entry.uploaded {
                match dest {
                    Destination::Dir(root) => {
                        resumed += entry.bytes_done.div_ceil(part);
                        let mut off = entry.bytes_done;
                        while off < size {
                            let n = part.min(size - off) as usize;
                            // Paced before sending, so the last part also waits its turn.
                            pace(opts.rate_bytes_per_s, paced_since, sent + n as u64).await;
                            let data = read_at(path, off, n)?;
                            destination::dir_write_part(root, &key, off, &data)
                                .map_err(io(root))?;
                            off += n as u64;
                            sent += n as u64;
                            journal.objects.get_mut(file).expect("present").bytes_done = off;
                            save_journal(dir, &journal)?;
                            progress(sent);
                        }
                        if size == 0 {
                            destination::dir_write_part(root, &key, 0, &[]).map_err(io(root))?;
                        }
                        destination::dir_finish(root, &key).map_err(io(root))?;
                    }
                    Destination::S3 { bucket, .. } if size <= part => {
                        pace(opts.rate_bytes_per_s, paced_since, sent + size).await;
                        let data = read_at(path, 0, size as usize)?;
                        let r = deadline(&key, bucket.put_object(&key, &data)).await?;
                        check_status(&key, r.status_code())?;
                        sent += size;
                        progress(sent);
                    }
                    Destination::S3 { bucket, .. } => {
                      let attempt: Result<(), ExportError> = async {
                        let e = journal.objects.get_mut(file).expect("present");
                        let upload_id = match &e.upload_id {
                            Some(id) => id.clone(),
                            None => {
                                let r = deadline(
                                    &key,
                                    bucket.initiate_multipart_upload(
                                        &key,
                                        "application/octet-stream",
                                    ),
                                )
                                .await?;
                                e.upload_id = Some(r.upload_id.clone());
                                e.parts.clear();
                                r.upload_id
                            }
                        };
                        save_journal(dir, &journal)?;
                        let count = size.div_ceil(part) as u32;
                        for n in 1..=count {
                            if journal.objects[file].parts.contains_key(&n) {
                                resumed += 1;
                                continue;
                            }
                            let off = (n as u64 - 1) * part;
                            let len = part.min(size - off);
                            pace(opts.rate_bytes_per_s, paced_since, sent + len).await;
                            let data = read_at(path, off, len as usize)?;
                            let p = deadline(
                                &format!("{key} part {n}"),
                                bucket.put_multipart_chunk(
                                    data,
                                    &key,
                                    n,
                                    &upload_id,
                                    "application/octet-stream",
                                ),
                            )
                            .await?;
                            let o = journal.objects.get_mut(file).expect("present");
                            o.parts.insert(n, p.etag);
                            o.failed_runs = 0;
                            save_journal(dir, &journal)?;
                            sent += len;
                            progress(sent);
                        }
                        let parts = journal.objects[file]
                            .parts
                            .iter()
                            .map(|(&part_number, etag)| s3::serde_types::Part {
                                part_number,
                                etag: etag.clone(),
                            })
                            .collect();
                        let r = deadline(
                            &key,
                            bucket.complete_multipart_upload(&key, &upload_id, parts),
                        )
                        .await?;
                        check_status(&key, r.status_code())
                      }
                      .await;
                      if let Err(e) = attempt {
                          let o = journal.objects.get_mut(file).expect("present");
                          o.failed_runs += 1;
                          if o.failed_runs >= UPLOAD_TRIES {
                              tracing::warn!(object = %key, runs = o.failed_runs,
                                  "the multipart upload failed this many runs in a row without a part: the next run starts the object over");
                              if let Some(stuck) = o.upload_id.take() {
                                  // Its parts would stay on the store: asked to go, once.
                                  let aborted = deadline(&key, bucket.abort_upload(&key, &stuck)).await;
                                  if let Err(why) = aborted {
                                      tracing::warn!(object = %key, upload = %stuck, error = %why,
                                          "the upload given up could not be aborted: its parts may stay on the store");
                                  }
                              }
                              o.parts.clear();
                              o.failed_runs = 0;
                          }
                          // The upload's own error is the one reported; the journal's is logged.
                          if let Err(why) = save_journal(dir, &journal) {
                              tracing::error!(error = %why, "the export journal could not be saved after a failed run");
                          }
                          return Err(e);
                      }
                    }
                }
                journal.objects.get_mut(file).expect("present").uploaded = true;
                save_journal(dir, &journal)?;
            }
            // Read back and compare, whatever happened before.
            let t_verify = Instant::now();
            let verified = verify_object(dest, &key, size, crc, part).await;
            verify_s += t_verify.elapsed().as_secs_f64();
            paced_since += t_verify.elapsed();
            if let Err(e @ ExportError::Store(_)) = verified {
                // The store did not answer: nothing is known wrong with the object, which the
                // next run reads back again (the journal keeps it sent).
                return Err(e);
            }
            if let Err(e) = verified {
                // No longer known to be exported: whatever an earlier run recorded goes.
                let _ = std::fs::remove_file(dir.join(EXPORTED));
                let o = journal.objects.get_mut(file).expect("present");
                *o = ObjectProgress {
                    size_bytes: size,
                    crc32c: crc,
                    ..Default::default()
                };
                save_journal(dir, &journal)?;
                return Err(e);
            }
            records.push(ObjectRecord {
                file: file.clone(),
                key,
                size_bytes: size,
                crc32c: crc,
            });
        }
        Ok::<(), ExportError>(())
    })?;
    let exported = Exported {
        destination: dest.describe(),
        verified_unix_ns: snbuf_quantity::now_unix_ns(),
        objects: records.clone(),
    };
    assert_eq!(
        exported.objects.len(),
        files.len(),
        "every file exported and verified"
    );
    write_json(dir, EXPORTED, &exported)?;
    let mut deleted = false;
    if opts.delete_after_verify {
        // Every object was read back and matched: only now may the local copy go, with the
        // files of links on other outputs.
        snbuf_burst::outputs::remove_burst(dir).map_err(io(dir))?;
        deleted = true;
    }
    Ok(ExportReport {
        burst_dir: dir.display().to_string(),
        destination: dest.describe(),
        objects: records,
        bytes_sent: sent,
        parts_resumed: resumed,
        seconds: start.elapsed().as_secs_f64(),
        verify_seconds: verify_s,
        coding_seconds: coding_s,
        deleted,
    })
}

/// For benchmarks only: uploads the burst's files as plain multipart uploads with the same
/// client and part size, without journal, checksums, pacing or read-back, under keys ending in
/// `.raw`. Returns bytes and seconds: the store's own upload rate, for comparison with
/// `export_burst`'s.
pub fn raw_upload(dir: &Path, dest: &Destination, part: u64) -> Result<(u64, f64), ExportError> {
    let Destination::S3 { bucket, .. } = dest else {
        return Err(ExportError::Usage(
            "a raw upload needs an s3:// destination".into(),
        ));
    };
    let (burst_id, files) = burst_files(dir)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(io(dir))?;
    let start = Instant::now();
    let mut bytes = 0u64;
    rt.block_on(async {
        for file in &files {
            let path = dir.join(file);
            let size = std::fs::metadata(&path).map_err(io(&path))?.len();
            let key = format!("{}.raw", dest.key(&burst_id, file));
            if size <= part {
                let data = read_at(&path, 0, size as usize)?;
                let r = deadline(&key, bucket.put_object(&key, &data)).await?;
                check_status(&key, r.status_code())?;
            } else {
                let up = deadline(
                    &key,
                    bucket.initiate_multipart_upload(&key, "application/octet-stream"),
                )
                .await?;
                let mut parts = Vec::new();
                for n in 1..=size.div_ceil(part) as u32 {
                    let off = (n as u64 - 1) * part;
                    let data = read_at(&path, off, part.min(size - off) as usize)?;
                    parts.push(
                        deadline(
                            &key,
                            bucket.put_multipart_chunk(
                                data,
                                &key,
                                n,
                                &up.upload_id,
                                "application/octet-stream",
                            ),
                        )
                        .await?,
                    );
                }
                let r = deadline(
                    &key,
                    bucket.complete_multipart_upload(&key, &up.upload_id, parts),
                )
                .await?;
                check_status(&key, r.status_code())?;
            }
            bytes += size;
        }
        Ok::<(), ExportError>(())
    })?;
    Ok((bytes, start.elapsed().as_secs_f64()))
}

/// Whether `dest` can be reached now (a directory that exists, a bucket that answers), for a
/// clear message at start. A unit records either way; its exports are tried again later.
pub fn probe(dest: &Destination) -> Result<(), String> {
    match dest {
        Destination::Dir(d) if d.is_dir() => Ok(()),
        Destination::Dir(d) => Err(format!("{}: not a directory", d.display())),
        Destination::S3 { bucket, .. } => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            let r = rt.block_on(async {
                tokio::time::timeout(Duration::from_secs(5), bucket.exists()).await
            });
            match r {
                Ok(Ok(true)) => Ok(()),
                Ok(Ok(false)) => {
                    Err("the bucket does not exist or these credentials cannot see it".into())
                }
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err("no answer within 5 s".into()),
            }
        }
    }
}
