//! `verify` and a dry-run `recover` on a burst directory made of any bytes: the first two bytes
//! give the length of the manifest, the rest is link 0's file. Neither may panic, and a dry run
//! must change nothing.
#![no_main]

use libfuzzer_sys::fuzz_target;
use snbuf_burst::{recover_burst, verify_burst};

fuzz_target!(|bytes: &[u8]| {
    if bytes.len() < 2 {
        return;
    }
    let n = (u16::from_le_bytes([bytes[0], bytes[1]]) as usize).min(bytes.len() - 2);
    let (manifest, data) = bytes[2..].split_at(n);
    // /dev/shm where there is one: the target is about parsing, not the disk.
    let parent = if std::path::Path::new("/dev/shm").is_dir() {
        "/dev/shm"
    } else {
        "/tmp"
    };
    let dir = tempfile::tempdir_in(parent).unwrap();
    std::fs::write(dir.path().join("manifest.json"), manifest).unwrap();
    std::fs::write(dir.path().join("link-0000.dat"), data).unwrap();
    let _ = verify_burst(dir.path());
    let _ = recover_burst(dir.path(), true);
    assert_eq!(
        std::fs::read(dir.path().join("link-0000.dat")).unwrap(),
        data
    );
    assert_eq!(
        std::fs::read(dir.path().join("manifest.json")).unwrap(),
        manifest
    );
});
