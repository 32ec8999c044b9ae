//! The export journal (`.export-journal.json` in the burst directory): what each object's upload
//! has done, kept across runs, so that after a crash or a network failure nothing already sent
//! is sent again.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::{write_json, Destination, ExportError};

pub(crate) const JOURNAL: &str = ".export-journal.json";

/// Runs in a row that may fail on one multipart upload before it is started over.
pub(crate) const UPLOAD_TRIES: u32 = 3;

/// Progress of one object.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct ObjectProgress {
    pub size_bytes: u64,
    pub crc32c: u32,
    /// A multipart upload: its id and its completed parts (number, from 1 → tag).
    pub upload_id: Option<String>,
    pub parts: BTreeMap<u32, String>,
    pub uploaded: bool,
    /// Runs in a row that failed on this upload without adding a part. At `UPLOAD_TRIES` the
    /// upload is started over: a store can drop an upload (the S3 client aborts one when a part
    /// is answered with an error; Garage then answered NoSuchUpload to every part, then closed
    /// the connection before reading one), and a run that resumed it for ever would never
    /// export the burst. A run that added a part was not stuck: the count starts again.
    #[serde(default)]
    pub failed_runs: u32,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct Journal {
    destination: String,
    part_bytes: u64,
    pub objects: BTreeMap<String, ObjectProgress>,
}

impl Journal {
    /// The journal of an earlier run to the same destination with the same part size, or a new
    /// one (parts of another size cannot be resumed).
    pub fn load(dir: &Path, dest: &Destination, part_bytes: u64) -> Journal {
        std::fs::read(dir.join(JOURNAL))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .filter(|j: &Journal| j.destination == dest.describe() && j.part_bytes == part_bytes)
            .unwrap_or_else(|| Journal {
                destination: dest.describe(),
                part_bytes,
                objects: BTreeMap::new(),
            })
    }

    pub fn save(&self, dir: &Path) -> Result<(), ExportError> {
        write_json(dir, JOURNAL, self)
    }

    /// The progress of `file`, started over if the file is not the one it was (or is new).
    pub fn object(&mut self, file: &str, size_bytes: u64, crc32c: u32) -> &mut ObjectProgress {
        let entry = self.objects.entry(file.to_string()).or_default();
        if entry.size_bytes != size_bytes || entry.crc32c != crc32c {
            *entry = ObjectProgress {
                size_bytes,
                crc32c,
                ..Default::default()
            };
        }
        entry
    }

    pub fn get(&mut self, file: &str) -> &mut ObjectProgress {
        self.objects
            .get_mut(file)
            .expect("an object of the journal")
    }
}
