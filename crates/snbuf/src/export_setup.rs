//! What `export` and `serve --export-to` share: a destination and its options checked before
//! anything runs.

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
    let rate = rate
        .map(|r| {
            snbuf_quantity::parse_rate_bytes_per_s(r)
                .map_err(|e| usage(format!("rate: {e}")))
                .and_then(|v| {
                    if v == 0 {
                        Err(usage("the export rate must be more than 0"))
                    } else {
                        Ok(v)
                    }
                })
        })
        .transpose()?;
    let dest = Destination::parse_with(url, s3).map_err(map_err)?;
    Ok((
        dest,
        ExportOptions {
            rate_bytes_per_s: rate,
            part_bytes,
            delete_after_verify,
            codec,
        },
    ))
}

/// An export error for the command line: the user's mistake (exit 2) or the machine's (exit 1).
pub fn map_err(e: ExportError) -> anyhow::Error {
    match e {
        ExportError::Usage(m) => usage(m),
        other => anyhow::Error::new(Failure(other.to_string())),
    }
}
