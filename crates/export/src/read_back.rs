//! Reading an export back: each object's size and CRC-32C against the local file's, after it is
//! sent and, for a burst exported before, again later (`read_back_again`): what a store that
//! loses power with its unit may have lost since it acknowledged it.

use std::path::Path;

use crate::{
    check_status, deadline, destination, io, Destination, ExportError, Exported, EXPORTED, JOURNAL,
};

/// What a second read-back of an exported burst found.
#[derive(Clone, Debug, PartialEq)]
pub enum ReadBack {
    /// Every object is there and matches; the export was first verified at this time.
    Intact { verified_unix_ns: u64 },
    /// Not exported there after all (an object missing or changed, the record gone or for
    /// another destination): the record is removed, and the burst must be exported again.
    Lost(String),
}

/// Reads every object of the exported burst in `dir` back from `dest` once more, without
/// sending anything: what a store that loses power with its unit may have lost since it
/// acknowledged it. Err: the store could not be asked (nothing is changed).
pub fn read_back_again(
    dir: &Path,
    dest: &Destination,
    part_bytes: u64,
) -> Result<ReadBack, ExportError> {
    let record = std::fs::read_to_string(dir.join(EXPORTED))
        .ok()
        .and_then(|t| serde_json::from_str::<Exported>(&t).ok())
        .filter(|e| e.destination == dest.describe());
    let Some(record) = record else {
        return Ok(ReadBack::Lost(format!(
            "no export record for {}",
            dest.describe()
        )));
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(io(dir))?;
    let checked = rt.block_on(async {
        for o in &record.objects {
            verify_object(dest, &o.key, o.size_bytes, o.crc32c, part_bytes).await?;
        }
        Ok::<(), ExportError>(())
    });
    match checked {
        Ok(()) => Ok(ReadBack::Intact {
            verified_unix_ns: record.verified_unix_ns,
        }),
        Err(e @ ExportError::Verify { .. }) => {
            // The journal still says sent: the next export starts over from the local files.
            std::fs::remove_file(dir.join(EXPORTED)).map_err(io(dir))?;
            let _ = std::fs::remove_file(dir.join(JOURNAL));
            Ok(ReadBack::Lost(e.to_string()))
        }
        Err(e) => Err(e),
    }
}

/// Reads the object back in parts and checks its size and CRC-32C. A wrong or missing object
/// is `Verify`; a store that does not answer is `Store` (nothing known about the object).
pub(crate) async fn verify_object(
    dest: &Destination,
    key: &str,
    size: u64,
    crc: u32,
    part: u64,
) -> Result<(), ExportError> {
    let fail = |why: String| ExportError::Verify {
        key: key.to_string(),
        why,
    };
    let (mut n, mut got) = (0u64, 0u32);
    match dest {
        Destination::Dir(root) => {
            let len = match std::fs::metadata(root.join(key)) {
                Ok(m) => m.len(),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Err(fail("not found".into()))
                }
                Err(e) => return Err(ExportError::Store(format!("{key}: cannot stat: {e}"))),
            };
            if len != size {
                return Err(fail(format!("{len} B, expected {size} B")));
            }
            while n < size {
                let data = destination::dir_read(root, key, n, part.min(size - n) as usize)
                    .map_err(|e| fail(format!("read back: {e}")))?;
                if data.is_empty() {
                    break;
                }
                got = crc32c::crc32c_append(got, &data);
                n += data.len() as u64;
            }
        }
        Destination::S3 { bucket, .. } => {
            let (head, code) = deadline(key, bucket.head_object(key)).await?;
            if code == 404 {
                return Err(fail("not found (HTTP 404)".into()));
            }
            check_status(key, code)?;
            let len = head.content_length.unwrap_or(-1);
            if len != size as i64 {
                return Err(fail(format!("{len} B, expected {size} B")));
            }
            while n < size {
                let end = (n + part).min(size) - 1;
                let r = deadline(key, bucket.get_object_range(key, n, Some(end))).await?;
                if r.status_code() == 404 {
                    return Err(fail("gone while read back (HTTP 404)".into()));
                }
                check_status(key, r.status_code())?;
                let data = r.as_slice();
                if data.is_empty() {
                    break;
                }
                got = crc32c::crc32c_append(got, data);
                n += data.len() as u64;
            }
        }
    }
    if n != size || got != crc {
        return Err(fail(format!(
            "read back {n} B with CRC-32C {got:08x}, the local file has {size} B with {crc:08x}"
        )));
    }
    Ok(())
}
