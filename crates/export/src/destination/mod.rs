//! Where bursts go, behind one interface: a `ExportStore` holds objects under keys, takes them whole or
//! in numbered parts that a later run may resume, and reads them back. The export's protocol
//! (journal, pacing, read-back, manifest last) is written once over it, in `export_burst`.
//!
//! The destinations a URL can name are listed in `SCHEMES`: a new one is a file of this module
//! and one line there.

mod dir;
mod s3;

pub use dir::DirStore;
pub use s3::S3Settings;

use crate::ExportError;

/// One kind of place bursts go. Every call returns within a deadline (a store that does not
/// answer is `StoreError::Failed`), and an Ok means the store has the bytes as far as it can say.
pub trait ExportStore: Send + Sync {
    /// Where, for people and for the export record (never with credentials).
    fn describe(&self) -> String;
    /// The smallest part a multipart upload takes, the last part excepted.
    fn min_part_bytes(&self) -> u64;
    /// Whether it can be reached now, for a clear message at start.
    fn probe(&self) -> Result<(), StoreError>;
    /// Stores `data` as the whole object `key`, replacing any there.
    fn put(&self, key: &str, data: Vec<u8>) -> Result<(), StoreError>;
    /// Starts a multipart upload of `key`; its id is kept in the journal, so that a later run can
    /// add the parts that are missing.
    fn begin_upload(&self, key: &str) -> Result<String, StoreError>;
    /// Sends one part of an upload; returns its tag (an ETag), which completing it needs.
    fn put_part(&self, key: &str, upload: &str, part: Part) -> Result<String, StoreError>;
    /// Makes the object of an upload from its parts' tags, in part order (1, 2, ...).
    fn complete_upload(&self, key: &str, upload: &str, tags: Vec<String>)
        -> Result<(), StoreError>;
    /// Gives up an upload: its parts need not stay on the store.
    fn abort_upload(&self, key: &str, upload: &str) -> Result<(), StoreError>;
    /// The size of object `key` in bytes; None when there is no such object.
    fn size(&self, key: &str) -> Result<Option<u64>, StoreError>;
    /// The bytes of object `key` from `offset`, `len` of them (fewer at its end), told to
    /// `each` as they come: a read-back checks them without holding them.
    fn read(
        &self,
        key: &str,
        offset: u64,
        len: u64,
        each: &mut dyn FnMut(&[u8]),
    ) -> Result<(), StoreError>;
}

/// One part of a multipart upload: its number (from 1) and where it sits in the object.
pub struct Part {
    pub number: u32,
    pub offset_bytes: u64,
    pub data: Vec<u8>,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The object (or the upload) is not there.
    #[error("not found")]
    NotFound,
    /// The store answered with an error, or not within its deadline: nothing is known about
    /// the object.
    #[error("{0}")]
    Failed(String),
}

/// A store opened from what follows its URL's scheme, with the key prefix the URL names.
type Open = fn(&str, &S3Settings) -> Result<(Box<dyn ExportStore>, String), String>;

/// The destinations a URL can name, by scheme.
const SCHEMES: &[(&str, Open)] = &[("file://", dir::open), ("s3://", s3::open)];

/// An export's destination: a store, and the prefix its keys start with.
pub struct Destination {
    store: Box<dyn ExportStore>,
    prefix: String,
}

impl Destination {
    /// Parses `file:///DIR` or `s3://BUCKET[/PREFIX]`, with S3 settings from the environment.
    pub fn parse(url: &str) -> Result<Destination, ExportError> {
        Self::parse_with(url, &S3Settings::default())
    }

    /// As `parse`, with `s3` (from a config file) taking precedence over the environment.
    pub fn parse_with(url: &str, s3: &S3Settings) -> Result<Destination, ExportError> {
        let bad = |why: &str| ExportError::Usage(format!("--to {url}: {why}"));
        let schemes: Vec<&str> = SCHEMES.iter().map(|(s, _)| *s).collect();
        let (rest, open) = SCHEMES
            .iter()
            .find_map(|(scheme, open)| url.strip_prefix(scheme).map(|rest| (rest, open)))
            .ok_or_else(|| {
                bad(&format!(
                    "expected s3://BUCKET/PREFIX or file:///DIR (schemes: {})",
                    schemes.join(", ")
                ))
            })?;
        let (store, prefix) = open(rest, s3).map_err(|why| bad(&why))?;
        Ok(Destination { store, prefix })
    }

    /// A destination on a store made elsewhere (an embedding program's, a test's), its keys
    /// under `prefix` (none when empty).
    pub fn on_store(store: Box<dyn ExportStore>, prefix: &str) -> Destination {
        Destination {
            store,
            prefix: prefix.trim_matches('/').to_string(),
        }
    }

    /// A directory destination, as `file://DIR` names it.
    pub fn dir(root: &std::path::Path) -> Result<Destination, ExportError> {
        Self::parse(&format!("file://{}", root.display()))
    }

    /// The destination for people (no credentials).
    pub fn describe(&self) -> String {
        self.store.describe()
    }

    /// The object key of `file` of burst `burst`.
    pub fn key(&self, burst: &str, file: &str) -> String {
        if self.prefix.is_empty() {
            format!("{burst}/{file}")
        } else {
            format!("{}/{burst}/{file}", self.prefix)
        }
    }

    /// The store itself.
    pub fn store(&self) -> &dyn ExportStore {
        self.store.as_ref()
    }
}
