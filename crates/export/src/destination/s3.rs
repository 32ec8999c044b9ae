//! `s3://BUCKET[/PREFIX]`: an S3-compatible object store (AWS, Garage, MinIO, Ceph's radosgw),
//! through Apache Arrow's `object_store`. Credentials come from the config file's `[s3]` table
//! or the environment (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`) and are never printed; the
//! endpoint from `SNBUF_S3_ENDPOINT` (or `AWS_ENDPOINT_URL`), the region from `AWS_REGION`.

use std::time::Duration;

use futures::StreamExt;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::multipart::{MultipartStore, PartId};
use object_store::path::Path as Key;
use object_store::{
    BackoffConfig, ClientOptions, GetOptions, ObjectStore, ObjectStoreExt, RetryConfig,
};

use super::{ExportStore, Part, StoreError};

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

/// Longest an object store may take to answer one request (a 16 MiB part included), retries
/// included: past it the request fails (the journal keeps what was done) instead of hanging.
const REQUEST_DEADLINE: Duration = Duration::from_secs(120);

/// Longest a connection may take to open.
const CONNECT_DEADLINE: Duration = Duration::from_secs(10);

/// The S3 API's smallest part, the last excepted.
const MIN_PART_BYTES: u64 = 5 << 20;

pub struct S3Store {
    store: AmazonS3,
    /// The store's requests run on this runtime alone: its connections belong to it.
    runtime: tokio::runtime::Runtime,
    /// For `probe`: the keys under it.
    prefix: Option<Key>,
    shown: String,
}

/// Where the store is and how to sign in to it: each from the config file's `[s3]` table, else
/// the environment.
struct Signing {
    endpoint: String,
    region: String,
    key: String,
    secret: String,
}

fn signing(s3: &S3Settings) -> Result<Signing, String> {
    let env = |k: &str| std::env::var(k).ok();
    let endpoint = s3
        .endpoint
        .clone()
        .or_else(|| env("SNBUF_S3_ENDPOINT"))
        .or_else(|| env("AWS_ENDPOINT_URL"))
        .ok_or("set SNBUF_S3_ENDPOINT (or s3.endpoint in the config file) to the object store's URL, e.g. http://127.0.0.1:3900")?;
    let endpoint = checked_endpoint(&endpoint)?;
    let region = s3
        .region
        .clone()
        .or_else(|| env("AWS_REGION"))
        .unwrap_or_else(|| "us-east-1".into());
    let missing = "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or s3.access_key_id and s3.secret_access_key in the config file)";
    let key = s3
        .access_key_id
        .clone()
        .or_else(|| env("AWS_ACCESS_KEY_ID"))
        .ok_or(missing)?;
    let secret = s3
        .secret_access_key
        .clone()
        .or_else(|| env("AWS_SECRET_ACCESS_KEY"))
        .ok_or(missing)?;
    Ok(Signing {
        endpoint,
        region,
        key,
        secret,
    })
}

pub(super) fn open(
    rest: &str,
    s3: &super::S3Settings,
) -> Result<(Box<dyn ExportStore>, String), String> {
    let (name, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    let prefix = prefix.trim_matches('/').to_string();
    check_bucket(name)?;
    let prefix_key = (!prefix.is_empty())
        .then(|| Key::parse(&prefix))
        .transpose()
        .map_err(|e| format!("the prefix {prefix:?}: {e}"))?;
    let Signing {
        endpoint,
        region,
        key,
        secret,
    } = signing(s3)?;
    // A few quick retries of a request that failed in passing; an export that fails is tried
    // again by its next run, from its journal.
    let retry = RetryConfig {
        backoff: BackoffConfig::default(),
        max_retries: 3,
        retry_timeout: Duration::from_secs(30),
    };
    let store = AmazonS3Builder::new()
        .with_bucket_name(name)
        .with_endpoint(&endpoint)
        .with_virtual_hosted_style_request(false)
        .with_region(region)
        .with_access_key_id(key)
        .with_secret_access_key(secret)
        .with_retry(retry)
        .with_client_options(
            // The options whole (allow_http is one of them: set on the builder before, it
            // would be replaced here).
            // A plain-http store needs no trust store: a unit without CA certificates (an
            // initramfs, a minimal image) still reaches it (the client failed to build there).
            ClientOptions::new()
                .with_allow_http(endpoint.starts_with("http://"))
                .with_no_system_certificates(endpoint.starts_with("http://"))
                .with_timeout(REQUEST_DEADLINE)
                .with_connect_timeout(CONNECT_DEADLINE),
        )
        .build()
        .map_err(|e| e.to_string())?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("the S3 client's runtime: {e}"))?;
    let store = S3Store {
        store,
        runtime,
        prefix: prefix_key,
        shown: format!("s3://{name}/{prefix} at {endpoint}"),
    };
    Ok((Box::new(store), prefix))
}

/// A bucket name as S3 stores take them (letters, digits, `.`, `-`, `_`; at most 255): anything
/// else would make no valid request, and is the user's mistake. (How short a name the store
/// takes is the store's to say.)
fn check_bucket(name: &str) -> Result<(), String> {
    let ok = name.len() <= 255
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'));
    if name.is_empty() {
        Err("no bucket".into())
    } else if !ok {
        Err(format!(
            "bucket {name:?}: a bucket name is up to 255 letters, digits, '.', '-' or '_'"
        ))
    } else {
        Ok(())
    }
}

/// The endpoint as a URL of the store: http or https (any case), a host, an optional port. What
/// is not (`127.0.0.1:3900`, `http://`) is the user's mistake, said at once.
fn checked_endpoint(endpoint: &str) -> Result<String, String> {
    let bad = |why: &str| format!("endpoint {endpoint:?}: {why}, e.g. http://127.0.0.1:3900");
    let url = url::Url::parse(endpoint).map_err(|e| bad(&e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(bad("not an http:// or https:// URL"));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(bad("no host"));
    }
    // The scheme as the client compares it (`HTTP://` is `http://`), the rest as given.
    Ok(format!(
        "{}{}",
        url.scheme(),
        &endpoint[url.scheme().len()..]
    ))
}

/// The object key `k` as it is (never re-encoded: the key recorded is the key stored); a key
/// with an empty segment, `.`, `..` or a control character is refused.
fn object_key(k: &str) -> Result<Key, StoreError> {
    Key::parse(k).map_err(|e| StoreError::Failed(format!("object key {k:?}: {e}")))
}

/// An error of the store with what caused it (a refused connection, a failed name lookup, a
/// TLS mismatch), each cause once.
fn with_causes(e: &object_store::Error) -> String {
    let mut said = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        let text = c.to_string();
        if !said.contains(&text) {
            said = format!("{said}: {text}");
        }
        cause = c.source();
    }
    said
}

/// Longest the probe at start waits: a store that does not answer is said at once, and the
/// unit starts (its exports are tried again later).
const PROBE_DEADLINE: Duration = Duration::from_secs(5);

impl S3Store {
    /// Runs one request of the store to its end or its deadline.
    fn run<T, F>(&self, request: impl FnOnce() -> F) -> Result<T, StoreError>
    where
        F: std::future::Future<Output = object_store::Result<T>>,
    {
        self.run_within(REQUEST_DEADLINE, request)
    }

    /// `run` with a deadline of its own; the request is made in the runtime's context (a
    /// listing starts at once).
    fn run_within<T, F>(
        &self,
        deadline: Duration,
        request: impl FnOnce() -> F,
    ) -> Result<T, StoreError>
    where
        F: std::future::Future<Output = object_store::Result<T>>,
    {
        let _in_runtime = self.runtime.enter();
        let f = request();
        match self.runtime.block_on(tokio::time::timeout(deadline, f)) {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(object_store::Error::NotFound { .. })) => Err(StoreError::NotFound),
            Ok(Err(e)) => Err(StoreError::Failed(with_causes(&e))),
            Err(_) => Err(StoreError::Failed(format!(
                "the store did not answer within {} s",
                deadline.as_secs()
            ))),
        }
    }
}

impl ExportStore for S3Store {
    fn describe(&self) -> String {
        self.shown.clone()
    }

    fn min_part_bytes(&self) -> u64 {
        MIN_PART_BYTES
    }

    fn probe(&self) -> Result<(), StoreError> {
        // One listing request: a bucket that is not there, or credentials that cannot see it,
        // answer it with an error.
        let listing = || {
            let mut list = self.store.list(self.prefix.as_ref());
            async move { list.next().await.transpose() }
        };
        match self.run_within(PROBE_DEADLINE, listing) {
            Ok(_) => Ok(()),
            Err(StoreError::NotFound) => Err(StoreError::Failed(
                "the bucket does not exist or these credentials cannot see it".into(),
            )),
            Err(e) => Err(e),
        }
    }

    fn put(&self, key: &str, data: Vec<u8>) -> Result<(), StoreError> {
        let key = object_key(key)?;
        self.run(|| self.store.put(&key, data.into())).map(|_| ())
    }

    fn begin_upload(&self, key: &str) -> Result<String, StoreError> {
        let key = object_key(key)?;
        self.run(|| self.store.create_multipart(&key))
    }

    fn put_part(&self, key: &str, upload: &str, part: Part) -> Result<String, StoreError> {
        assert!(part.number >= 1, "S3 parts are numbered from 1");
        let (key, upload) = (object_key(key)?, upload.to_string());
        let index = part.number as usize - 1;
        self.run(|| self.store.put_part(&key, &upload, index, part.data.into()))
            .map(|p| p.content_id)
    }

    fn complete_upload(
        &self,
        key: &str,
        upload: &str,
        tags: Vec<String>,
    ) -> Result<(), StoreError> {
        let (key, upload) = (object_key(key)?, upload.to_string());
        let parts = tags
            .into_iter()
            .map(|content_id| PartId { content_id })
            .collect();
        self.run(|| self.store.complete_multipart(&key, &upload, parts))
            .map(|_| ())
    }

    fn abort_upload(&self, key: &str, upload: &str) -> Result<(), StoreError> {
        let (key, upload) = (object_key(key)?, upload.to_string());
        self.run(|| self.store.abort_multipart(&key, &upload))
    }

    fn size(&self, key: &str) -> Result<Option<u64>, StoreError> {
        let key = object_key(key)?;
        match self.run(|| self.store.head(&key)) {
            Ok(meta) => Ok(Some(meta.size)),
            Err(StoreError::NotFound) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn read(
        &self,
        key: &str,
        offset: u64,
        len: u64,
        each: &mut dyn FnMut(&[u8]),
    ) -> Result<(), StoreError> {
        let key = object_key(key)?;
        let options = GetOptions::new().with_range(Some(offset..offset + len));
        // The body as it arrives, each piece told and dropped: no copy of the range is made.
        self.run(|| async {
            let mut body = self.store.get_opts(&key, options).await?.into_stream();
            while let Some(piece) = body.next().await {
                each(&piece?);
            }
            Ok(())
        })
    }
}
