//! Where bursts go: an S3-compatible object store (`s3://BUCKET/PREFIX`), or a directory
//! (`file:///DIR`, the embedded destination). Credentials come from the environment
//! (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`) and are never printed; the endpoint from
//! `SNBUF_S3_ENDPOINT` (or `AWS_ENDPOINT_URL`), the region from `AWS_REGION`.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use s3::creds::Credentials;
use s3::{Bucket, Region};

use crate::ExportError;

pub enum Destination {
    Dir(PathBuf),
    S3 {
        bucket: Box<Bucket>,
        prefix: String,
        shown: String,
    },
}

impl Destination {
    /// Parses `file:///DIR` or `s3://BUCKET[/PREFIX]`.
    pub fn parse(url: &str) -> Result<Destination, ExportError> {
        let bad = |why: &str| ExportError::Usage(format!("--to {url}: {why}"));
        if let Some(dir) = url.strip_prefix("file://") {
            let dir = PathBuf::from(dir);
            if !dir.is_absolute() {
                return Err(bad(
                    "file:// needs an absolute directory (file:///data/export)",
                ));
            }
            return Ok(Destination::Dir(dir));
        }
        let Some(rest) = url.strip_prefix("s3://") else {
            return Err(bad("expected s3://BUCKET/PREFIX or file:///DIR"));
        };
        let (name, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if name.is_empty() {
            return Err(bad("no bucket"));
        }
        let endpoint = std::env::var("SNBUF_S3_ENDPOINT")
            .or_else(|_| std::env::var("AWS_ENDPOINT_URL"))
            .map_err(|_| {
                bad("set SNBUF_S3_ENDPOINT to the object store's URL (e.g. http://127.0.0.1:3900)")
            })?;
        let region = std::env::var("AWS_REGION").unwrap_or_else(|_| "us-east-1".into());
        let key = std::env::var("AWS_ACCESS_KEY_ID")
            .map_err(|_| bad("set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"))?;
        let secret = std::env::var("AWS_SECRET_ACCESS_KEY")
            .map_err(|_| bad("set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"))?;
        let creds = Credentials::new(Some(&key), Some(&secret), None, None, None)
            .map_err(|e| bad(&format!("credentials: {e}")))?;
        let bucket = Bucket::new(
            name,
            Region::Custom {
                region,
                endpoint: endpoint.clone(),
            },
            creds,
        )
        .map_err(|e| bad(&e.to_string()))?
        .with_path_style();
        Ok(Destination::S3 {
            bucket,
            prefix: prefix.trim_matches('/').to_string(),
            shown: format!("s3://{name}/{} at {endpoint}", prefix.trim_matches('/')),
        })
    }

    /// The destination for people (no credentials).
    pub fn describe(&self) -> String {
        match self {
            Destination::Dir(d) => format!("file://{}", d.display()),
            Destination::S3 { shown, .. } => shown.clone(),
        }
    }

    /// The object key (or relative path) of `file` of burst `burst`.
    pub fn key(&self, burst: &str, file: &str) -> String {
        match self {
            Destination::S3 { prefix, .. } if !prefix.is_empty() => {
                format!("{prefix}/{burst}/{file}")
            }
            _ => format!("{burst}/{file}"),
        }
    }
}

/// Parts of a file copied into a directory destination: written to `KEY.partial` at their
/// offsets, flushed, then renamed into place once complete (resumable by length).
pub fn dir_write_part(dir: &Path, key: &str, offset: u64, data: &[u8]) -> std::io::Result<()> {
    let path = dir.join(format!("{key}.partial"));
    if let Some(p) = path.parent() {
        std::fs::create_dir_all(p)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)?;
    f.seek(SeekFrom::Start(offset))?;
    f.write_all(data)?;
    f.sync_data()
}

pub fn dir_finish(dir: &Path, key: &str) -> std::io::Result<()> {
    let to = dir.join(key);
    std::fs::rename(dir.join(format!("{key}.partial")), &to)?;
    if let Some(p) = to.parent() {
        std::fs::File::open(p)?.sync_all()?;
    }
    Ok(())
}

/// Reads `len` bytes at `offset` of a directory destination's object.
pub fn dir_read(dir: &Path, key: &str, offset: u64, len: usize) -> std::io::Result<Vec<u8>> {
    let mut f = std::fs::File::open(dir.join(key))?;
    f.seek(SeekFrom::Start(offset))?;
    let mut buf = vec![0u8; len];
    let mut n = 0;
    while n < len {
        let k = f.read(&mut buf[n..])?;
        if k == 0 {
            break;
        }
        n += k;
    }
    buf.truncate(n);
    Ok(buf)
}
