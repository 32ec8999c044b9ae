//! `snbuf export --codec frames`: a burst's link files travel through the frame codec, as
//! `<file>.snbl` beside a manifest that says so, and the copy in the store reads as the burst:
//! `verify` passes on it and `extract` gives the very frames of the local burst. A coded
//! object damaged in the store is an error, never other frames.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{small_recording, snbuf, snbuf_owned, stderr, wait_for_socket, KillOnDrop};

/// A burst of 2 emulated WIBEth links, recorded by the real binary, and a directory store.
fn burst_and_store(root: &Path) -> (PathBuf, PathBuf) {
    let out = root.join("rec");
    let o = snbuf_owned(&small_recording(&out, "b", &[("--frame", "wibeth")]));
    assert!(o.status.success(), "{}", stderr(&o));
    let store = root.join("store");
    std::fs::create_dir(&store).unwrap();
    (out.join("b"), store)
}

fn export_coded(dir: &Path, store: &Path) -> serde_json::Value {
    let to = format!("file://{}", store.display());
    let o = snbuf(&[
        "export",
        dir.to_str().unwrap(),
        "--to",
        &to,
        "--part-size",
        "5MiB",
        "--codec",
        "frames",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// Link `link`'s frames from the burst in `dir`, by `snbuf extract`.
fn extracted(dir: &Path, link: u32, out: &Path) -> Vec<u8> {
    let o = snbuf(&[
        "extract",
        dir.to_str().unwrap(),
        "--link",
        &link.to_string(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    std::fs::read(out).unwrap()
}

#[test]
fn a_coded_export_takes_a_fraction_of_the_bytes_and_reads_as_the_burst() {
    let root = tempfile::tempdir().unwrap();
    let (dir, store) = burst_and_store(root.path());
    let raw: u64 = ["link-0000.dat", "link-0001.dat"]
        .iter()
        .map(|f| std::fs::metadata(dir.join(f)).unwrap().len())
        .sum();
    let r = export_coded(&dir, &store);
    let objects = r["objects"].as_array().unwrap();
    let names: Vec<&str> = objects
        .iter()
        .map(|o| o["file"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["link-0000.dat.snbl", "link-0001.dat.snbl", "manifest.json"]
    );
    let coded: u64 = objects[..2]
        .iter()
        .map(|o| o["size_bytes"].as_u64().unwrap())
        .sum();
    // The emulator's noise is the detector's: a third of the bytes, about.
    assert!(
        (coded as f64) < 0.45 * raw as f64,
        "{coded} B coded of {raw}"
    );
    assert!(
        !dir.join(".export-coded").exists(),
        "the coded files go once verified"
    );

    let copy = store.join("b");
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(copy.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["coded"], "snbuf-frames-2");
    let o = snbuf(&["verify", copy.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    // `ls` of the store: the copy, what it takes there, and what it is.
    let o = snbuf(&["ls", store.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let listed: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(listed[0]["burst_id"], "b", "{listed}");
    assert_eq!(listed[0]["bytes"], coded, "{listed}");
    assert_eq!(listed[0]["state"], "sealed, coded copy", "{listed}");
    // A coded copy exported again: one clear line (exit 2), not a missing file.
    let again = root.path().join("again");
    std::fs::create_dir(&again).unwrap();
    let to = format!("file://{}", again.display());
    let o = snbuf(&["export", copy.to_str().unwrap(), "--to", &to]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("a coded copy (codec snbuf-frames-2)"),
        "{}",
        stderr(&o)
    );
    // `inspect` names the file it read: the coded one.
    let o = snbuf(&["inspect", copy.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let inspected: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let file = inspected["links"][0]["file"].as_str().unwrap();
    assert!(
        file.ends_with("link-0000.dat.snbl") && Path::new(file).exists(),
        "{file}"
    );
    for link in 0..2 {
        let here = extracted(&dir, link, &root.path().join(format!("here{link}.bin")));
        let there = extracted(&copy, link, &root.path().join(format!("there{link}.bin")));
        assert!(!here.is_empty());
        assert!(here == there, "link {link}: the store's frames differ");
    }
}

#[test]
fn a_coded_object_damaged_in_the_store_is_an_error_never_other_frames() {
    let root = tempfile::tempdir().unwrap();
    let (dir, store) = burst_and_store(root.path());
    export_coded(&dir, &store);
    let whole = extracted(&dir, 1, &root.path().join("whole.bin"));
    let copy = store.join("b");
    let object = copy.join("link-0001.dat.snbl");
    let good = std::fs::read(&object).unwrap();
    for (what, bad) in [
        ("a flipped bit", {
            let mut b = good.clone();
            b[good.len() / 2] ^= 0x10;
            b
        }),
        ("cut short", good[..good.len() - 100].to_vec()),
    ] {
        std::fs::write(&object, &bad).unwrap();
        let o = snbuf(&["verify", copy.to_str().unwrap()]);
        assert!(!o.status.success(), "{what}: verify passed");
        // As a damaged raw file reads: the chunks before the damage, never other frames.
        let out = root.path().join(format!("x-{}.bin", bad.len()));
        let o = snbuf(&[
            "extract",
            copy.to_str().unwrap(),
            "--link",
            "1",
            "--out",
            out.to_str().unwrap(),
        ]);
        let got = std::fs::read(&out).unwrap_or_default();
        // Said, and not a success: a script must not take the prefix for the link.
        assert_eq!(o.status.code(), Some(1), "{what}: {}", stderr(&o));
        assert!(stderr(&o).contains("damaged"), "{what}: {}", stderr(&o));
        assert!(
            got.len() < whole.len() && whole.starts_with(&got),
            "{what}: extract gave {} B, not a part of the {} B sent ({})",
            got.len(),
            whole.len(),
            stderr(&o)
        );
        assert!(
            !got.is_empty(),
            "{what}: the chunks before the damage are lost too"
        );
    }
}

#[test]
fn serve_exports_each_burst_coded_when_asked() {
    let root = tempfile::tempdir().unwrap();
    let (store, socket) = (root.path().join("store"), root.path().join("ctl.sock"));
    std::fs::create_dir(&store).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_snbuf"))
        .args(["serve", "--output"])
        .arg(root.path().join("rec"))
        .arg("--socket")
        .arg(&socket)
        .args(["--links", "2", "--rate-per-link", "5MB/s", "--buffer", "2s"])
        .args(["--pre", "300ms", "--post", "300ms", "--method", "direct"])
        .args(["--frame", "wibeth", "--export-to"])
        .arg(format!("file://{}", store.display()))
        .args(["--export-codec", "frames"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _server = KillOnDrop(child);
    wait_for_socket(&socket);
    std::thread::sleep(Duration::from_millis(600));
    let o = snbuf(&[
        "trigger",
        "--socket",
        socket.to_str().unwrap(),
        "--burst-id",
        "new",
        "--wait",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let local = root.path().join("rec").join("new");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !local.join("export.json").exists() {
        assert!(Instant::now() < deadline, "the burst was not exported");
        std::thread::sleep(Duration::from_millis(100));
    }
    let copy = store.join("new");
    assert!(copy.join("link-0000.dat.snbl").exists() && !copy.join("link-0000.dat").exists());
    let o = snbuf(&["verify", copy.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let here = extracted(&local, 1, &root.path().join("here.bin"));
    assert!(here == extracted(&copy, 1, &root.path().join("there.bin")));
}

#[test]
fn a_coded_copy_is_not_recovered_and_its_coded_files_are_the_ones_read() {
    let root = tempfile::tempdir().unwrap();
    let (dir, store) = burst_and_store(root.path());
    export_coded(&dir, &store);
    let copy = store.join("b");
    let manifest = std::fs::read(copy.join("manifest.json")).unwrap();
    // Recover would call every link missing: it refuses, and changes nothing.
    let o = snbuf(&["recover", copy.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("a coded copy"), "{}", stderr(&o));
    assert_eq!(std::fs::read(copy.join("manifest.json")).unwrap(), manifest);
    // A stale plain file beside the coded one (an export without --codec to the same place,
    // later cut short): the manifest says coded, so the coded file is the one read and checked.
    std::fs::write(copy.join("link-0000.dat"), b"stale").unwrap();
    let o = snbuf(&["verify", copy.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let mut coded = std::fs::read(copy.join("link-0000.dat.snbl")).unwrap();
    let mid = coded.len() / 2;
    coded[mid] ^= 0x01;
    std::fs::write(copy.join("link-0000.dat.snbl"), coded).unwrap();
    let o = snbuf(&["verify", copy.to_str().unwrap()]);
    assert!(
        !o.status.success(),
        "a damaged coded file behind a plain one went unseen"
    );
}

/// The offset of the first coded payload in the coded link file `coded`.
fn first_coded_payload(coded: &[u8]) -> usize {
    let mut at = 4 + 2 + coded[5] as usize;
    loop {
        let (kind, len) = (
            coded[at],
            u32::from_le_bytes(coded[at + 1..at + 5].try_into().unwrap()) as usize,
        );
        assert_ne!(kind, 0xff, "a coded file with no coded payload");
        if kind == 1 {
            return at + 5;
        }
        at += 5 + len;
    }
}

#[test]
fn a_copy_coded_by_a_newer_snbuf_says_so_and_is_never_read_as_damage() {
    let root = tempfile::tempdir().unwrap();
    let (dir, store) = burst_and_store(root.path());
    export_coded(&dir, &store);
    let copy = store.join("b");
    let read_back = |what: &str| {
        let o = snbuf(&["verify", copy.to_str().unwrap()]);
        assert!(!o.status.success(), "{what}: verify passed");
        let said = String::from_utf8_lossy(&o.stdout);
        assert!(said.contains("upgrade snbuf"), "{what}: {said}");
        let out = root.path().join("x.bin");
        let o = snbuf(&[
            "extract",
            copy.to_str().unwrap(),
            "--link",
            "0",
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(!o.status.success(), "{what}: extract passed");
        assert!(
            stderr(&o).contains("upgrade snbuf"),
            "{what}: {}",
            stderr(&o)
        );
        assert!(std::fs::read(&out).unwrap_or_default().is_empty(), "{what}");
    };
    // A codec this snbuf does not know, named by the manifest.
    let path = copy.join("manifest.json");
    let manifest = std::fs::read_to_string(&path).unwrap();
    let renamed = manifest.replace("\"snbuf-frames-2\"", "\"snbuf-frames-9\"");
    assert_ne!(renamed, manifest);
    std::fs::write(&path, renamed).unwrap();
    read_back("a newer codec's name");
    // A copy written before format 2 names snbuf-frames-1, and reads.
    std::fs::write(&path, manifest.replace("snbuf-frames-2", "snbuf-frames-1")).unwrap();
    let o = snbuf(&["verify", copy.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    // A payload in a format this snbuf does not know: not damage, so not zeros and a prefix.
    let object = copy.join("link-0000.dat.snbl");
    let mut coded = std::fs::read(&object).unwrap();
    let at = first_coded_payload(&coded);
    assert_eq!(&coded[at..at + 5], b"SNBC\x02");
    coded[at + 4] = 3;
    std::fs::write(&object, coded).unwrap();
    read_back("a newer payload format");
}
