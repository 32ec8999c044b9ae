//! An S3 client of the tests' own, beside snbuf's: what another program on the store does (puts
//! an object over one, lists, downloads). Each call has a deadline.

use std::time::Duration;

use futures::StreamExt;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as Key;
use object_store::{ObjectStore, ObjectStoreExt};

/// Longest one request may take.
const REQUEST_DEADLINE: Duration = Duration::from_secs(60);

pub struct S3Client {
    store: AmazonS3,
    runtime: tokio::runtime::Runtime,
}

impl S3Client {
    /// A client of `bucket` at `endpoint` (http://HOST:PORT), region "garage".
    pub fn new(endpoint: &str, key_id: &str, secret: &str, bucket: &str) -> S3Client {
        let store = AmazonS3Builder::new()
            .with_bucket_name(bucket)
            .with_endpoint(endpoint)
            .with_allow_http(true)
            .with_region("garage")
            .with_access_key_id(key_id)
            .with_secret_access_key(secret)
            .build()
            .expect("an S3 client");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        S3Client { store, runtime }
    }

    /// The client of a test's Garage, from the environment `garage()` gave.
    pub fn of(env: &[(String, String)]) -> S3Client {
        let get = |k: &str| env.iter().find(|(n, _)| n == k).unwrap().1.clone();
        Self::new(
            &get("SNBUF_S3_ENDPOINT"),
            &get("AWS_ACCESS_KEY_ID"),
            &get("AWS_SECRET_ACCESS_KEY"),
            "snbuf",
        )
    }

    fn run<T>(
        &self,
        what: &str,
        f: impl std::future::Future<Output = object_store::Result<T>>,
    ) -> Result<T, String> {
        // The deadline's timer belongs to the runtime.
        let _in_runtime = self.runtime.enter();
        match self
            .runtime
            .block_on(tokio::time::timeout(REQUEST_DEADLINE, f))
        {
            Ok(r) => r.map_err(|e| format!("{what}: {e}")),
            Err(_) => Err(format!(
                "{what}: no answer within {} s",
                REQUEST_DEADLINE.as_secs()
            )),
        }
    }

    pub fn put(&self, key: &str, body: &[u8]) -> Result<(), String> {
        self.run(key, self.store.put(&Key::from(key), body.to_vec().into()))
            .map(|_| ())
    }

    /// Every key under `prefix`.
    pub fn list(&self, prefix: &str) -> Result<Vec<String>, String> {
        let prefix = (!prefix.is_empty()).then(|| Key::from(prefix));
        let listing = self.store.list(prefix.as_ref());
        self.run("list", async {
            let metas: Vec<_> = listing.collect().await;
            metas
                .into_iter()
                .map(|m| m.map(|m| m.location.to_string()))
                .collect()
        })
    }

    pub fn get(&self, key: &str) -> Result<Vec<u8>, String> {
        self.run(key, async {
            let body = self.store.get(&Key::from(key)).await?;
            Ok(body.bytes().await?.to_vec())
        })
    }
}
