//! A target on a full file system: the sink fails with a clear ENOSPC error (at allocation when
//! prefaulting, at the write otherwise), and stays failed. Needs a tiny tmpfs, which only root
//! can mount: otherwise the test skips and says so.

use std::path::Path;
use std::process::Command;

use snbuf_persist::{open, Method, PersistError, SinkConfig};

struct Mount(tempfile::TempDir);

impl Mount {
    fn tmpfs(size: &str) -> Option<Mount> {
        let dir = tempfile::tempdir().ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        ok.then_some(Mount(dir))
    }
    fn path(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0.path()).status();
    }
}

#[test]
fn enospc_is_reported_plainly_and_latched() {
    let Some(mnt) = Mount::tmpfs("1M") else {
        assert!(
            std::env::var_os("SNBUF_REQUIRE_ROOT").is_none(),
            "SNBUF_REQUIRE_ROOT is set and this test cannot run here"
        );
        eprintln!("skip: cannot mount a small tmpfs (needs root) to fill a file system");
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
