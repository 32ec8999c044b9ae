//! What `export` and `serve --export-to` share: a destination and its options checked before
//! anything runs, and a server's sealed bursts handed to the export queue.

use snbuf_export::{Destination, ExportError, ExportOptions};

use crate::exit::{usage, Failure};

/// The destination and options of an export, checked (as usage errors) before anything runs.
pub fn options(
    url: &str,
    s3: &snbuf_export::S3Settings,
    rate: Option<&str>,
    part_bytes: u64,
    delete_after_verify: bool,
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
        },
    ))
}

/// Queues for export every burst of `server` that ends from now on, and those an earlier run
/// left unexported (sealed, failed or recovered, without `export.json`).
pub fn follow_bursts(
    server: &std::sync::Arc<snbuf_unit::service::control::Server>,
    queue: std::sync::Arc<snbuf_export::queue::ExportQueue>,
) -> std::io::Result<()> {
    let out = server.unit().config().output_dir.clone();
    for e in std::fs::read_dir(&out)?.flatten() {
        let dir = e.path();
        if let Ok(m) = snbuf_burst::Manifest::read(&dir) {
            if m.state != snbuf_burst::BurstState::Recording
                && !dir.join(snbuf_export::EXPORTED).exists()
            {
                queue.push(dir);
            }
        }
    }
    let server = server.clone();
    let mut seen = server.recent_bursts().0;
    std::thread::Builder::new()
        .name("snbuf-export-follow".into())
        .spawn(move || loop {
            std::thread::sleep(std::time::Duration::from_millis(500));
            let (total, recent) = server.recent_bursts();
            let new = (total - seen).min(recent.len() as u64) as usize;
            for b in &recent[recent.len() - new..] {
                // A burst that could not even be created has nothing to export.
                if b.state != "error" {
                    queue.push(out.join(&b.burst_id));
                }
            }
            seen = total;
        })?;
    Ok(())
}

/// An export error for the command line: the user's mistake (exit 2) or the machine's (exit 1).
pub fn map_err(e: ExportError) -> anyhow::Error {
    match e {
        ExportError::Usage(m) => usage(m),
        other => anyhow::Error::new(Failure(other.to_string())),
    }
}
