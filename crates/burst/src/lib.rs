//! snbuf-burst: the on-disk burst format and its reader.
//!
//! A burst is a directory: one data file per link (`link-0003.dat`), a sequence of checksummed
//! chunks (docs/FORMAT.md), and `manifest.json`. `chunk_writer` makes chunks durable through any
//! `snbuf_persist::Sink`; `scan` reads them back; `verify` checks a burst without changing it;
//! `recover` cuts a crashed burst back to what is provably intact. `opening` sizes, prepares and
//! opens a burst's files (before its trigger where it can); `link_writer` writes a burst of links
//! and seals it; `outputs` spreads its links over several devices.

pub mod chunk;
pub mod chunk_writer;
pub mod coded_link;
pub mod link_writer;
pub mod manifest;
pub mod names;
pub mod opening;
pub mod outputs;
pub mod read;
mod recording_lock;
pub mod recover;
pub mod scan;
pub mod spec;
pub mod trigger_coverage;
pub mod verify;

pub use chunk::{ChunkHeader, FORMAT_VERSION, HEADER_BYTES};
pub use chunk_writer::{ChunkAck, ChunkWriter, WriteError};
pub use link_writer::{BurstSeal, BurstWriter, LinkWriter};
pub use manifest::{
    AnsweredTrigger, BurstState, FrameInfo, LinkData, LinkIdentity, LinkRecord, LinkState,
    Manifest, Verified, Window,
};
pub use opening::prepared::PreparedBurst;
pub use opening::{BurstFiles, OpenError};
pub use read::{BurstReader, LinkReader, ReadError};
pub use recording_lock::{being_recorded, hold as hold_burst};
pub use recover::{recover_burst, RecoverReport};
pub use scan::{scan, End, Expect, ScanReport};
pub use spec::{check_burst_id, BurstError, BurstSpec};
pub use trigger_coverage::TriggerCoverage;
pub use verify::{verify_burst, VerifyReport};
