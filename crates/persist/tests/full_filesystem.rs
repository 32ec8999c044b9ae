//! A target on a full file system: the sink fails with a clear ENOSPC error (at allocation when
//! prefaulting, at the write otherwise), and stays failed. Needs a tiny tmpfs, which only root
//! can mount: otherwise the test skips and says so.

use snbuf_persist::{open, Method, PersistError, SinkConfig};
use snbuf_testkit::{skip_unless_required, Mount};

#[test]
fn enospc_is_reported_plainly_and_latched() {
    let Some(mnt) = Mount::tmpfs("size=1M") else {
        skip_unless_required(
            "SNBUF_REQUIRE_ROOT",
            "a small tmpfs to fill cannot be mounted (needs root)",
        );
        return;
    };
    // Prefaulting: the allocation fails up front, before any data is accepted.
    let err = open(&SinkConfig::new(Method::Nt, mnt.path().join("a"), 8 << 20))
        .err()
        .unwrap();
    assert!(matches!(err, PersistError::NoSpace { .. }), "{err:?}");
    assert!(err.to_string().contains("no space left"), "{err}");

    // Without prefaulting the file is sparse and the write itself meets ENOSPC.
    let mut config = SinkConfig::new(Method::Buffered, mnt.path().join("b"), 8 << 20);
    config.prefault = false;
    let mut sink = open(&config).unwrap();
    let block = vec![7u8; 256 << 10];
    let mut failed = None;
    for i in 0..32u64 {
        if let Err(e) = sink.write_at(i * block.len() as u64, &block) {
            failed = Some(e);
            break;
        }
    }
    let e = failed.expect("8 MiB cannot fit in 1 MiB");
    assert!(matches!(e, PersistError::NoSpace { .. }), "{e:?}");
    // Latched: a later persist does not pretend all is well.
    let again = sink.persist().unwrap_err();
    assert!(matches!(again, PersistError::Latched { .. }), "{again:?}");
}
