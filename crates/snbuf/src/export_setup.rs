//! What `export` and `serve --export-to` share: a destination and its options checked before
//! anything runs (`snbuf_export::options`), and its errors as the command line reports them.

use snbuf_export::{Destination, ExportError, ExportOptions};

use crate::exit::{usage, Failure};

/// The destination and options of an export, checked (as usage errors) before anything runs.
pub fn options(
    url: &str,
    s3: &snbuf_export::S3Settings,
    rate: Option<&str>,
    part_bytes: u64,
    delete_after_verify: bool,
    codec: snbuf_export::ExportCodec,
) -> anyhow::Result<(Destination, ExportOptions)> {
    snbuf_export::options(url, s3, rate, part_bytes, delete_after_verify, codec).map_err(map_err)
}

/// An export error for the command line: the user's mistake (exit 2) or the machine's (exit 1).
pub fn map_err(e: ExportError) -> anyhow::Error {
    match e {
        ExportError::Usage(m) => usage(m),
        other => anyhow::Error::new(Failure(other.to_string())),
    }
}
