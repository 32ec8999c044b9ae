//! An S3 destination as a user names it: a malformed endpoint, bucket or prefix is the user's
//! mistake, said at once in one line (never a panic inside the client, never a request); and a
//! store that takes the connection but never answers is said within the probe's deadline, so
//! that a unit starting beside it is not held up.

use std::time::{Duration, Instant};

use snbuf_export::{Destination, ExportError, S3Settings};

fn settings(endpoint: &str) -> S3Settings {
    S3Settings {
        endpoint: Some(endpoint.into()),
        region: Some("garage".into()),
        access_key_id: Some("GKtest".into()),
        secret_access_key: Some("not-a-secret".into()),
    }
}

fn refused(url: &str, endpoint: &str) -> String {
    match Destination::parse_with(url, &settings(endpoint)) {
        Err(ExportError::Usage(why)) => why,
        Err(e) => panic!("{url} at {endpoint}: not a usage error: {e}"),
        Ok(d) => panic!("{url} at {endpoint}: taken as {}", d.describe()),
    }
}

#[test]
fn a_malformed_endpoint_bucket_or_prefix_is_refused_in_one_line() {
    for endpoint in [
        "127.0.0.1:3900",
        "localhost:3900",
        "http://",
        "",
        "ftp://h:1",
    ] {
        let why = refused("s3://snbuf/p", endpoint);
        assert!(why.contains("endpoint"), "{endpoint}: {why}");
        assert!(!why.contains('\n'), "{why}");
    }
    for url in ["s3://a b/x", "s3://a?b/x", "s3://a%2Fb/x"] {
        let why = refused(url, "http://127.0.0.1:3900");
        assert!(why.contains("bucket"), "{url}: {why}");
    }
    for url in ["s3://snbuf/a//b", "s3://snbuf/../x", "s3://snbuf/a\tb"] {
        let why = refused(url, "http://127.0.0.1:3900");
        assert!(why.contains("prefix"), "{url}: {why}");
    }
}

#[test]
fn keys_are_kept_as_written_and_the_scheme_in_any_case() {
    let d =
        Destination::parse_with("s3://snbuf/run~1", &settings("HTTP://127.0.0.1:3900")).unwrap();
    assert_eq!(d.key("b", "link-0000.dat"), "run~1/b/link-0000.dat");
    assert!(
        d.describe().contains("http://127.0.0.1:3900"),
        "{}",
        d.describe()
    );
}

#[test]
fn a_store_that_never_answers_is_said_within_the_probes_deadline() {
    // Takes the connection (the kernel's backlog) and never reads or answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", silent.local_addr().unwrap());
    let d = Destination::parse_with("s3://snbuf/p", &settings(&endpoint)).unwrap();
    let t = Instant::now();
    let e = snbuf_export::probe(&d).unwrap_err();
    assert!(
        t.elapsed() < Duration::from_secs(15),
        "{:?}: {e}",
        t.elapsed()
    );
    assert!(e.contains("did not answer"), "{e}");
}
