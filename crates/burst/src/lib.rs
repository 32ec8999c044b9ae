//! snbuf-burst: the on-disk burst format and its reader.
//!
//! A burst is a directory: one data file per link (`link-0003.dat`), a sequence of checksummed
//! chunks (docs/FORMAT.md), and `manifest.json`. `writer` makes chunks durable through any
//! `snbuf_persist::Sink`; `scan` reads them back; `verify` checks a burst without changing it;
//! `recover` cuts a crashed burst back to what is provably intact. `prepared` readies a burst's
//! files before its trigger.

pub mod burst_writer;
pub mod chunk;
pub mod manifest;
pub mod prepared;
pub mod recover;
pub mod scan;
pub mod verify;
pub mod writer;

pub use burst_writer::{BurstError, BurstSeal, BurstSpec, BurstWriter, LinkWriter};
pub use chunk::{ChunkHeader, FORMAT_VERSION, HEADER_BYTES};
pub use manifest::{BurstState, FrameInfo, LinkRecord, LinkState, Manifest, TriggerInfo};
pub use prepared::PreparedBurst;
pub use recover::{recover_burst, RecoverReport};
pub use scan::{scan, End, Expect, ScanReport};
pub use verify::{verify_burst, VerifyReport};
pub use writer::{ChunkAck, ChunkWriter, LinkTotals, WriteError};
