//! A burst over two outputs (`--output A --output B`), as a user records, checks, repairs and
//! exports it: links spread round-robin, the files on B reached through symbolic links in the
//! burst directory on A and named in the manifest; verify, recover, ls and export take the burst
//! whole, and export's --delete-after-verify removes the files on both.

mod common;

use std::path::Path;

use common::{assert_refused, small_recording, snbuf, snbuf_owned};

fn record_on_two(a: &Path, b: &Path, id: &str) -> std::path::PathBuf {
    let mut args = small_recording(a, id, &[("--links", "3")]);
    args.extend(["--output".to_string(), b.to_str().unwrap().to_string()]);
    let o = snbuf_owned(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    a.join(id)
}

#[test]
fn links_are_spread_over_the_outputs_and_the_burst_is_taken_whole() {
    let root = tempfile::tempdir().unwrap();
    let (a, b) = (root.path().join("a"), root.path().join("b"));
    let burst = record_on_two(&a, &b, "two");

    // Link 1 on B, reached from A through a symbolic link, and named in the manifest.
    let on_b = b.join("two").join("link-0001.dat");
    assert!(on_b.metadata().unwrap().is_file());
    let through_a = burst.join("link-0001.dat");
    assert!(through_a
        .symlink_metadata()
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(
        std::fs::canonicalize(&through_a).unwrap(),
        std::fs::canonicalize(&on_b).unwrap()
    );
    for l in [0, 2] {
        let f = burst.join(format!("link-000{l}.dat"));
        assert!(
            f.symlink_metadata().unwrap().is_file(),
            "link {l} stays on A"
        );
    }
    let m = snbuf_burst::Manifest::read(&burst).unwrap();
    assert_eq!(m.state, snbuf_burst::BurstState::Sealed);
    let paths: Vec<Option<String>> = m.links.iter().map(|l| l.path.clone()).collect();
    assert!(paths[0].is_none() && paths[2].is_none(), "{paths:?}");
    assert!(Path::new(paths[1].as_deref().unwrap()).is_absolute());
    assert!(m.links.iter().all(|l| l.data.frames > 0));

    let s = burst.to_str().unwrap();
    assert_eq!(snbuf(&["verify", s]).status.code(), Some(0));
    let ls = snbuf(&["ls", a.to_str().unwrap(), "--json"]);
    assert!(ls.status.success());
    let listed: serde_json::Value = serde_json::from_slice(&ls.stdout).unwrap();
    let bytes = listed[0]["bytes"].as_u64().unwrap_or(0);
    assert!(
        bytes >= m.links.iter().map(|l| l.data.file_bytes).sum::<u64>(),
        "ls counts the files on B: {listed}"
    );

    // A torn tail on B is found through A and cut off by recover, on B.
    let len = on_b.metadata().unwrap().len();
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&on_b)
        .unwrap();
    std::io::Write::write_all(&mut f, &[0x5a; 700]).unwrap();
    drop(f);
    assert_eq!(snbuf(&["verify", s]).status.code(), Some(1));
    assert!(snbuf(&["recover", s]).status.success());
    assert_eq!(on_b.metadata().unwrap().len(), len, "trimmed on B");
    assert!(through_a
        .symlink_metadata()
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(snbuf(&["verify", s]).status.code(), Some(0));
    let m = snbuf_burst::Manifest::read(&burst).unwrap();
    assert_eq!(
        m.links[1].path, paths[1],
        "recover keeps where the file lives"
    );

    // Exported whole (the file on B as data, not as a link); deleting removes it from both.
    let store = root.path().join("store");
    std::fs::create_dir(&store).unwrap();
    let to = format!("file://{}", store.display());
    let o = snbuf(&["export", s, "--to", &to, "--delete-after-verify"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let exported = store.join("two").join("link-0001.dat");
    assert!(exported.symlink_metadata().unwrap().is_file());
    assert_eq!(exported.metadata().unwrap().len(), len);
    assert!(
        !burst.exists() && !b.join("two").exists(),
        "removed from both outputs"
    );
}

#[test]
fn one_directory_given_twice_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let a = root.path().join("a");
    let mut args = small_recording(&a, "x", &[]);
    args.extend(["--output".to_string(), format!("{}/.", a.display())]);
    assert_refused(&snbuf_owned(&args), 2, "given twice");
}
