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

/// How to reach and sign in to an S3 store. Each field not set here is taken from the
/// environment (`SNBUF_S3_ENDPOINT` or `AWS_ENDPOINT_URL`, `AWS_REGION`, `AWS_ACCESS_KEY_ID`,
/// `AWS_SECRET_ACCESS_KEY`). Debug output hides the secret.
#[derive(Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct S3Settings {
    pub endpoint: Option<String>,
    pub region: Option<String>,
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
}

impl std::fmt::Debug for S3Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Settings")
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("access_key_id", &self.access_key_id)
            .field(
                "secret_access_key",
                &self.secret_access_key.as_ref().map(|_| "(hidden)"),
            )
            .finish()
    }
}

impl Destination {
    /// Parses `file:///DIR` or `s3://BUCKET[/PREFIX]`, with S3 settings from the environment.
    pub fn parse(url: &str) -> Result<Destination, ExportError> {
        Self::parse_with(url, &S3Settings::default())
    }

    /// As `parse`, with `s3` (from a config file) taking precedence over the environment.
    pub fn parse_with(url: &str, s3: &S3Settings) -> Result<Destination, ExportError> {
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
        let env = |k: &str| std::env::var(k).ok();
        let endpoint = s3
            .endpoint
            .clone()
            .or_else(|| env("SNBUF_S3_ENDPOINT"))
            .or_else(|| env("AWS_ENDPOINT_URL"))
            .ok_or_else(|| {
                bad("set SNBUF_S3_ENDPOINT (or s3.endpoint in the config file) to the object store's URL, e.g. http://127.0.0.1:3900")
            })?;
        let region = s3
            .region
            .clone()
            .or_else(|| env("AWS_REGION"))
            .unwrap_or_else(|| "us-east-1".into());
        let missing = || {
            bad("set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or s3.access_key_id and s3.secret_access_key in the config file)")
        };
        let key = s3
            .access_key_id
            .clone()
            .or_else(|| env("AWS_ACCESS_KEY_ID"))
            .ok_or_else(missing)?;
        let secret = s3
            .secret_access_key
            .clone()
            .or_else(|| env("AWS_SECRET_ACCESS_KEY"))
            .ok_or_else(missing)?;
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
