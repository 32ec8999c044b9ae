//! The export protocol over a store that misbehaves the ways real ones do: it acknowledges a
//! part it then holds wrong, it goes away halfway, it forgets an upload. A directory store does
//! the storing; a wrapper around it does the faults. Each test is a guard of the protocol that
//! fails if the guard is taken out.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use snbuf_burst::{BurstSpec, BurstWriter, FrameInfo, Window};
use snbuf_export::destination::{DirStore, ExportStore, Part, StoreError};
use snbuf_export::{export_burst, read_back_again, Destination, ExportCodec, ExportError};
use snbuf_export::{ExportOptions, ReadBack};
use snbuf_persist::{open, Method, SinkConfig};

const FRAME_BYTES: u32 = 5568;
const TICKS_PER_FRAME: u64 = 300;
const FRAMES_PER_CHUNK: u64 = 4;
const CHUNKS: u64 = 6;
const FIRST_TS: u64 = 3_000_000;
/// Several parts a link file.
const PART_BYTES: u64 = 32 << 10;

/// A sealed burst of two links, written the recorder's way, in `root`.
fn burst(root: &Path) -> PathBuf {
    let spec = BurstSpec {
        burst_id: "export-test".into(),
        frame: FrameInfo {
            frame_type: "protodune-wib".into(),
            frame_bytes: FRAME_BYTES,
            ticks_per_frame: TICKS_PER_FRAME,
            clock_hz: 50_000_000,
            frame_step_ticks: None,
        },
        trigger: Some(Window {
            trigger_timestamp: FIRST_TS,
            window_start_timestamp: FIRST_TS,
            window_end_timestamp: FIRST_TS + CHUNKS * FRAMES_PER_CHUNK * TICKS_PER_FRAME,
            ..Window::default()
        }),
        method: "direct".into(),
        links: vec![0, 1],
        max_payload_bytes: (FRAME_BYTES as u64 * FRAMES_PER_CHUNK) as usize,
        identities: vec![],
        run_number: None,
        unit: None,
        injected_faults: Vec::new(),
    };
    std::fs::create_dir_all(root).unwrap();
    let mut w = BurstWriter::create(root, spec, |_, path| {
        open(&SinkConfig::new(Method::Direct, path, 1 << 20))
    })
    .unwrap();
    let layout = snbuf_frames::FrameType::ProtoDuneWib.layout();
    for link in 0..2usize {
        let mut ts = FIRST_TS;
        for seq in 0..CHUNKS {
            let mut b: Vec<u8> = (0..FRAME_BYTES as u64 * FRAMES_PER_CHUNK)
                .map(|i| (i ^ (seq * 131 + link as u64 * 7)) as u8)
                .collect();
            for (k, f) in b.chunks_exact_mut(FRAME_BYTES as usize).enumerate() {
                layout.write_timestamp(f, ts + k as u64 * TICKS_PER_FRAME);
            }
            let last = ts + (FRAMES_PER_CHUNK - 1) * TICKS_PER_FRAME;
            w.write_chunk(link, ts, last, &b).unwrap();
            ts = last + TICKS_PER_FRAME;
        }
    }
    let dir = w.dir().to_path_buf();
    w.seal().unwrap();
    dir
}

/// What the store does wrong, and what it was asked.
#[derive(Default)]
struct Faults {
    /// Acknowledges part N of every upload, but holds it with a byte flipped.
    corrupt_part: Option<u32>,
    /// Parts it takes before every request fails (the store went away).
    parts_before_outage: Option<usize>,
    /// Answers every part of an upload it did not start this run: it lost them.
    lost_uploads: Vec<String>,
    parts_taken: usize,
    /// Answers no read (the store went away after the upload).
    reads_fail: bool,
    /// Objects made, in order.
    made: Vec<String>,
}

struct FaultyStore {
    inner: DirStore,
    faults: Arc<Mutex<Faults>>,
}

impl ExportStore for FaultyStore {
    fn describe(&self) -> String {
        self.inner.describe()
    }
    fn min_part_bytes(&self) -> u64 {
        self.inner.min_part_bytes()
    }
    fn probe(&self) -> Result<(), StoreError> {
        self.inner.probe()
    }
    fn put(&self, key: &str, data: Vec<u8>) -> Result<(), StoreError> {
        self.inner.put(key, data)?;
        self.faults.lock().unwrap().made.push(key.into());
        Ok(())
    }
    fn begin_upload(&self, key: &str) -> Result<String, StoreError> {
        let id = self.inner.begin_upload(key)?;
        // A new upload (a directory's ids are its file names: the same again).
        self.faults
            .lock()
            .unwrap()
            .lost_uploads
            .retain(|u| *u != id);
        Ok(id)
    }
    fn put_part(&self, key: &str, upload: &str, mut part: Part) -> Result<String, StoreError> {
        let mut f = self.faults.lock().unwrap();
        if f.lost_uploads.iter().any(|u| u == upload) {
            return Err(StoreError::NotFound);
        }
        if f.parts_before_outage.is_some_and(|n| f.parts_taken >= n) {
            return Err(StoreError::Failed("connection refused".into()));
        }
        f.parts_taken += 1;
        let tag = self.inner.put_part(
            key,
            upload,
            Part {
                data: part.data.clone(),
                ..part
            },
        )?;
        if f.corrupt_part == Some(part.number) {
            part.data[7] ^= 0x40;
            self.inner.put_part(key, upload, part)?;
        }
        Ok(tag)
    }
    fn complete_upload(
        &self,
        key: &str,
        upload: &str,
        tags: Vec<String>,
    ) -> Result<(), StoreError> {
        let f = self.faults.lock().unwrap();
        if f.parts_before_outage.is_some_and(|n| f.parts_taken >= n) {
            return Err(StoreError::Failed("connection refused".into()));
        }
        drop(f);
        self.inner.complete_upload(key, upload, tags)?;
        self.faults.lock().unwrap().made.push(key.into());
        Ok(())
    }
    fn abort_upload(&self, key: &str, upload: &str) -> Result<(), StoreError> {
        self.inner.abort_upload(key, upload)
    }
    fn size(&self, key: &str) -> Result<Option<u64>, StoreError> {
        self.inner.size(key)
    }
    fn read(
        &self,
        key: &str,
        offset: u64,
        len: u64,
        each: &mut dyn FnMut(&[u8]),
    ) -> Result<(), StoreError> {
        if self.faults.lock().unwrap().reads_fail {
            return Err(StoreError::Failed("connection refused".into()));
        }
        self.inner.read(key, offset, len, each)
    }
}

struct Setup {
    _root: tempfile::TempDir,
    burst: PathBuf,
    store_dir: PathBuf,
    faults: Arc<Mutex<Faults>>,
    dest: Destination,
}

fn setup() -> Setup {
    let root = tempfile::tempdir().unwrap();
    let burst = burst(&root.path().join("rec"));
    let store_dir = root.path().join("store");
    std::fs::create_dir_all(&store_dir).unwrap();
    let faults = Arc::new(Mutex::new(Faults::default()));
    let store = FaultyStore {
        inner: DirStore::new(&store_dir),
        faults: faults.clone(),
    };
    let dest = Destination::on_store(Box::new(store), "apa-01");
    Setup {
        _root: root,
        burst,
        store_dir,
        faults,
        dest,
    }
}

fn opts() -> ExportOptions {
    ExportOptions {
        rate_bytes_per_s: None,
        part_bytes: PART_BYTES,
        delete_after_verify: false,
        codec: ExportCodec::None,
    }
}

fn link_files(burst: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(burst)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("link-"))
        .collect();
    v.sort();
    v
}

#[test]
fn an_export_holds_every_file_byte_for_byte_and_the_manifest_is_made_last() {
    let s = setup();
    let r = export_burst(&s.burst, &s.dest, &opts(), |_| {}).unwrap();
    let links = link_files(&s.burst);
    assert_eq!(links.len(), 2);
    for f in links.iter().chain([&"manifest.json".to_string()]) {
        let there = std::fs::read(s.store_dir.join("apa-01/export-test").join(f)).unwrap();
        assert_eq!(there, std::fs::read(s.burst.join(f)).unwrap(), "{f}");
    }
    assert_eq!(r.objects.len(), 3);
    assert!(
        r.bytes_sent > 2 * PART_BYTES,
        "several parts: {}",
        r.bytes_sent
    );
    assert!(s.burst.join("export.json").exists());
    let made = s.faults.lock().unwrap().made.clone();
    assert_eq!(made.len(), 3, "{made:?}");
    assert!(
        made.last().unwrap().ends_with("/manifest.json"),
        "the manifest after its data: {made:?}"
    );
}

#[test]
fn a_part_the_store_holds_wrong_fails_the_export_and_is_sent_again() {
    let s = setup();
    s.faults.lock().unwrap().corrupt_part = Some(2);
    let e = export_burst(&s.burst, &s.dest, &opts(), |_| {}).unwrap_err();
    assert!(matches!(e, ExportError::Verify { .. }), "{e}");
    assert!(!s.burst.join("export.json").exists(), "not marked exported");
    // The store is healthy again: the object is sent whole again, not trusted from the journal.
    s.faults.lock().unwrap().corrupt_part = None;
    let r = export_burst(&s.burst, &s.dest, &opts(), |_| {}).unwrap();
    assert_eq!(r.parts_resumed, 0, "nothing of the bad object resumed");
    let f = &link_files(&s.burst)[0];
    let there = std::fs::read(s.store_dir.join("apa-01/export-test").join(f)).unwrap();
    assert_eq!(there, std::fs::read(s.burst.join(f)).unwrap());
}

#[test]
fn a_store_that_goes_away_halfway_is_resumed_where_it_stopped() {
    let s = setup();
    s.faults.lock().unwrap().parts_before_outage = Some(3);
    let e = export_burst(&s.burst, &s.dest, &opts(), |_| {}).unwrap_err();
    assert!(matches!(e, ExportError::Store(_)), "{e}");
    assert!(!s.burst.join("export.json").exists());
    let total: u64 = link_files(&s.burst)
        .iter()
        .chain([&"manifest.json".to_string()])
        .map(|f| std::fs::metadata(s.burst.join(f)).unwrap().len())
        .sum();
    s.faults.lock().unwrap().parts_before_outage = None;
    let r = export_burst(&s.burst, &s.dest, &opts(), |_| {}).unwrap();
    assert_eq!(
        r.parts_resumed, 3,
        "the parts acknowledged before are not sent again"
    );
    assert_eq!(r.bytes_sent, total - 3 * PART_BYTES);
    assert!(s.burst.join("export.json").exists());
}

#[test]
fn an_upload_the_store_lost_is_started_over_after_three_runs() {
    let s = setup();
    s.faults.lock().unwrap().parts_before_outage = Some(1);
    export_burst(&s.burst, &s.dest, &opts(), |_| {}).unwrap_err();
    let journal: serde_json::Value =
        serde_json::from_slice(&std::fs::read(s.burst.join(".export-journal.json")).unwrap())
            .unwrap();
    let uploads: Vec<String> = journal["objects"]
        .as_object()
        .unwrap()
        .values()
        .filter_map(|o| o["upload_id"].as_str().map(str::to_string))
        .collect();
    assert_eq!(uploads.len(), 1, "{journal}");
    {
        let mut f = s.faults.lock().unwrap();
        f.parts_before_outage = None;
        f.lost_uploads = uploads;
    }
    // The run that went down with the store counted once (it failed); each run on the lost
    // upload counts again; the third in a row gives the upload up, and the next starts it over.
    let failed_runs = || -> u64 {
        let j: serde_json::Value =
            serde_json::from_slice(&std::fs::read(s.burst.join(".export-journal.json")).unwrap())
                .unwrap();
        j["objects"]["link-0000.dat"]["failed_runs"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(failed_runs(), 1);
    let e = export_burst(&s.burst, &s.dest, &opts(), |_| {}).unwrap_err();
    assert!(matches!(e, ExportError::Store(_)), "{e}");
    assert_eq!(failed_runs(), 2);
    export_burst(&s.burst, &s.dest, &opts(), |_| {}).unwrap_err();
    assert_eq!(failed_runs(), 0, "given up");
    export_burst(&s.burst, &s.dest, &opts(), |_| {}).unwrap();
    assert!(s.burst.join("export.json").exists());
}

#[test]
fn the_local_copy_goes_only_after_its_read_back_and_a_lost_object_is_found_later() {
    let s = setup();
    s.faults.lock().unwrap().corrupt_part = Some(1);
    let delete = ExportOptions {
        delete_after_verify: true,
        ..opts()
    };
    export_burst(&s.burst, &s.dest, &delete, |_| {}).unwrap_err();
    assert!(s.burst.join("manifest.json").exists(), "kept: not verified");
    s.faults.lock().unwrap().corrupt_part = None;
    export_burst(&s.burst, &s.dest, &opts(), |_| {}).unwrap();
    assert_eq!(
        read_back_again(&s.burst, &s.dest, PART_BYTES).unwrap(),
        ReadBack::Intact {
            verified_unix_ns: snbuf_export::exported_at(&s.burst).unwrap()
        }
    );
    // The store loses an object after it acknowledged it: the second read-back says so, and
    // the burst is no longer exported.
    let f = &link_files(&s.burst)[1];
    std::fs::remove_file(s.store_dir.join("apa-01/export-test").join(f)).unwrap();
    let again = read_back_again(&s.burst, &s.dest, PART_BYTES).unwrap();
    assert!(
        matches!(again, ReadBack::Lost(ref why) if why.contains("not found")),
        "{again:?}"
    );
    assert!(!s.burst.join("export.json").exists());
    let r = export_burst(&s.burst, &s.dest, &delete, |_| {}).unwrap();
    assert!(r.deleted && !s.burst.exists(), "deleted once verified");
}

#[test]
fn a_part_size_the_store_cannot_take_is_refused_before_anything_is_sent() {
    let s = setup();
    let zero = ExportOptions {
        part_bytes: 0,
        ..opts()
    };
    let e = export_burst(&s.burst, &s.dest, &zero, |_| {}).unwrap_err();
    assert!(matches!(e, ExportError::Usage(_)), "{e}");
    assert!(s.faults.lock().unwrap().made.is_empty());
}

#[test]
fn a_store_that_cannot_be_read_back_keeps_what_was_sent_and_marks_nothing() {
    let s = setup();
    s.faults.lock().unwrap().reads_fail = true;
    let e = export_burst(&s.burst, &s.dest, &opts(), |_| {}).unwrap_err();
    assert!(matches!(e, ExportError::Store(_)), "{e}");
    assert!(
        !s.burst.join("export.json").exists(),
        "not read back: not exported"
    );
    // Nothing is known wrong with the object: the next run reads it back, sends nothing again.
    s.faults.lock().unwrap().reads_fail = false;
    let first = &link_files(&s.burst)[0];
    let r = export_burst(&s.burst, &s.dest, &opts(), |_| {}).unwrap();
    let first_bytes = std::fs::metadata(s.burst.join(first)).unwrap().len();
    let total: u64 = link_files(&s.burst)
        .iter()
        .chain([&"manifest.json".to_string()])
        .map(|f| std::fs::metadata(s.burst.join(f)).unwrap().len())
        .sum();
    assert_eq!(
        r.bytes_sent,
        total - first_bytes,
        "the object sent before is not sent again"
    );
    assert!(s.burst.join("export.json").exists());
}

#[test]
fn an_upload_completed_before_its_run_said_so_is_not_sent_again() {
    let s = setup();
    export_burst(&s.burst, &s.dest, &opts(), |_| {}).unwrap();
    // A crash between the completion and the journal's record of it.
    let path = s.burst.join(".export-journal.json");
    let mut j: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    j["objects"]["link-0000.dat"]["uploaded"] = serde_json::json!(false);
    std::fs::write(&path, serde_json::to_vec(&j).unwrap()).unwrap();
    std::fs::remove_file(s.burst.join("export.json")).unwrap();
    let r = export_burst(&s.burst, &s.dest, &opts(), |_| {}).unwrap();
    assert_eq!(
        r.bytes_sent, 0,
        "the whole object on the store is read back, not sent again"
    );
    assert!(r.parts_resumed > 1);
    assert!(s.burst.join("export.json").exists());
}

#[test]
fn a_manifest_whose_burst_id_would_leave_the_destination_is_refused() {
    let s = setup();
    let path = s.burst.join("manifest.json");
    let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    m["burst_id"] = serde_json::json!("../../escaped");
    std::fs::write(&path, serde_json::to_vec(&m).unwrap()).unwrap();
    let e = export_burst(&s.burst, &s.dest, &opts(), |_| {}).unwrap_err();
    assert!(matches!(e, ExportError::Usage(_)), "{e}");
    assert!(s.faults.lock().unwrap().made.is_empty(), "nothing sent");
}
