//! Reading an export back: each object's size and CRC-32C against the local file's, after it is
//! sent and, for a burst exported before, again later (`read_back_again`): what a store that
//! loses power with its unit may have lost since it acknowledged it.

use std::path::Path;

use crate::destination::{ExportStore, StoreError};
use crate::journal::JOURNAL;
use crate::{Destination, ExportError, Exported, EXPORTED};

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
    let checked = record
        .objects
        .iter()
        .try_for_each(|o| verify_object(dest.store(), &o.key, o.size_bytes, o.crc32c, part_bytes));
    match checked {
        Ok(()) => Ok(ReadBack::Intact {
            verified_unix_ns: record.verified_unix_ns,
        }),
        Err(e @ ExportError::Verify { .. }) => {
            // The journal still says sent: the next export starts over from the local files.
            std::fs::remove_file(dir.join(EXPORTED)).map_err(|cause| ExportError::Io {
                path: dir.join(EXPORTED),
                cause,
            })?;
            let _ = std::fs::remove_file(dir.join(JOURNAL));
            Ok(ReadBack::Lost(e.to_string()))
        }
        Err(e) => Err(e),
    }
}

/// Reads the object back in parts and checks its size and CRC-32C. A wrong or missing object
/// is `Verify`; a store that does not answer is `ExportStore` (nothing known about the object).
pub(crate) fn verify_object(
    store: &dyn ExportStore,
    key: &str,
    size: u64,
    crc: u32,
    part: u64,
) -> Result<(), ExportError> {
    let fail = |why: String| ExportError::Verify {
        key: key.to_string(),
        why,
    };
    let unanswered = |e: StoreError| ExportError::Store(format!("{key}: {e}"));
    match store.size(key).map_err(unanswered)? {
        None => return Err(fail("not found".into())),
        Some(len) if len != size => return Err(fail(format!("{len} B, expected {size} B"))),
        Some(_) => {}
    }
    let (mut n, mut got) = (0u64, 0u32);
    while n < size {
        let (before, len) = (n, part.min(size - n));
        let mut take = |data: &[u8]| {
            got = crc32c::crc32c_append(got, data);
            n += data.len() as u64;
        };
        match store.read(key, before, len, &mut take) {
            Err(StoreError::NotFound) => return Err(fail("gone while read back".into())),
            r => r.map_err(unanswered)?,
        }
        if n == before {
            break;
        }
    }
    if n != size || got != crc {
        return Err(fail(format!(
            "read back {n} B with CRC-32C {got:08x}, the local file has {size} B with {crc:08x}"
        )));
    }
    Ok(())
}
