//! What a burst is about when it starts (`BurstSpec`), what makes a burst id acceptable, and why
//! a burst cannot be opened or written (`BurstError`).

use std::path::PathBuf;

use snbuf_persist::PersistError;

use crate::chunk_writer::WriteError;
use crate::manifest::{FrameInfo, LinkIdentity, ManifestError, Window};

#[derive(Debug, thiserror::Error)]
pub enum BurstError {
    #[error("{path}: {cause}")]
    Dir {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("{0}: already exists; a burst is never written over another")]
    Exists(PathBuf),
    #[error("burst id '{0}' is not a plain name: 1 to 128 letters, digits, '.', '_' or '-', not starting with '.'")]
    BadId(String),
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    #[error("link {link} ({file}): {cause}")]
    Open {
        link: u32,
        file: PathBuf,
        cause: PersistError,
    },
    #[error(transparent)]
    Write(#[from] WriteError),
    #[error("this burst does not match its preparation: {0}")]
    Mismatch(String),
}

/// What the burst is about, fixed when it starts.
#[derive(Clone, Debug)]
pub struct BurstSpec {
    pub burst_id: String,
    pub frame: FrameInfo,
    pub trigger: Option<Window>,
    pub method: String,
    pub links: Vec<u32>,
    pub max_payload_bytes: usize,
    /// Each link's detector identity, in `links` order (empty when not known).
    pub identities: Vec<LinkIdentity>,
    /// The run the burst belongs to, and the unit that records it.
    pub run_number: Option<u32>,
    pub unit: Option<String>,
    /// Faults injected into its recording (`--inject-fault`, for tests): said in its manifest.
    pub injected_faults: Vec<String>,
}

/// A burst id is a plain directory name inside the output directory: nothing that could escape
/// it, and not hidden.
pub fn check_burst_id(id: &str) -> Result<(), BurstError> {
    // Hidden names are the recorder's own (prepared bursts, temporary files). Letters, digits,
    // `.`, `_`, `-` only: an id is a directory name, a log field, a NATS header and a line of a
    // table, where a newline, a control character or a space would forge or break the others.
    let plain = id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if id.is_empty() || id.len() > MAX_BURST_ID_BYTES || id.starts_with('.') || !plain {
        return Err(BurstError::BadId(printable(id)));
    }
    debug_assert!(
        !id.contains('/') && !id.starts_with('.'),
        "an accepted id names a directory inside the output, never a path out of it"
    );
    Ok(())
}

/// The longest burst id: well inside a file name, with room for the recorder's suffixes.
pub const MAX_BURST_ID_BYTES: usize = 128;

/// `id` as it may be shown: control characters escaped, at most 80 characters.
fn printable(id: &str) -> String {
    let shown: String = id.chars().take(80).flat_map(char::escape_debug).collect();
    debug_assert!(
        !shown.chars().any(char::is_control),
        "a shown id has its control characters escaped"
    );
    if id.chars().count() > 80 {
        format!("{shown}...")
    } else {
        shown
    }
}
