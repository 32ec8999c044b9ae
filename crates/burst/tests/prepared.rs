//! Bursts prepared before their trigger: the files are opened ahead, the trigger renames the
//! directory and writes the manifest; an unused preparation leaves nothing behind.

use std::path::Path;

use snbuf_burst::opening::prepared::remove_stale;
use snbuf_burst::{verify_burst, BurstError, BurstSpec, BurstState, FrameInfo, PreparedBurst};
use snbuf_persist::{open, Method, Sink, SinkConfig};

const FRAME: u32 = 512;

fn spec(id: &str, links: Vec<u32>) -> BurstSpec {
    BurstSpec {
        burst_id: id.into(),
        frame: FrameInfo {
            frame_type: "custom".into(),
            frame_bytes: FRAME,
            ticks_per_frame: 10,
            clock_hz: 1_000_000,
            frame_step_ticks: None,
        },
        trigger: None,
        method: "direct".into(),
        links,
        max_payload_bytes: 4 * FRAME as usize,
        identities: vec![],
        run_number: None,
        unit: None,
        injected_faults: Vec::new(),
    }
}

fn prepare(parent: &Path, links: &[u32]) -> PreparedBurst<Box<dyn Sink>> {
    PreparedBurst::prepare(parent, links, FRAME, 4 * FRAME as usize, |_, path| {
        let mut c = SinkConfig::new(Method::Direct, path, 1 << 20);
        c.max_io_bytes = 64 << 10;
        open(&c)
    })
    .unwrap()
}

fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn a_prepared_burst_becomes_a_verified_burst() {
    let out = tempfile::tempdir().unwrap();
    let prepared = prepare(out.path(), &[0, 1]);
    let hidden = prepared.dir().unwrap().to_path_buf();
    assert!(
        hidden.join("link-0001.dat").exists(),
        "files exist before the trigger"
    );
    assert!(!prepared.fits(&spec("x", vec![0, 1, 2])), "other links");
    let burst = prepared.start(spec("b1", vec![0, 1])).unwrap();
    assert!(!hidden.exists());
    assert_eq!(entries(out.path()), vec!["b1"]);
    let (seal, mut links) = burst.split();
    for lw in &mut links {
        let frames = vec![lw.link() as u8 + 1; 3 * FRAME as usize];
        lw.write_chunk(100, 120, &frames).unwrap();
    }
    let m = seal.seal(links).unwrap();
    assert_eq!(m.state, BurstState::Sealed);
    assert_eq!(m.durability, "fdatasync");
    let v = verify_burst(&out.path().join("b1")).unwrap();
    assert!(v.valid, "{v:?}");
}

#[test]
fn an_unused_or_refused_preparation_leaves_nothing() {
    let out = tempfile::tempdir().unwrap();
    drop(prepare(out.path(), &[0, 1]));
    assert!(entries(out.path()).is_empty());

    std::fs::create_dir(out.path().join("taken")).unwrap();
    let r = prepare(out.path(), &[0]).start(spec("taken", vec![0]));
    assert!(
        matches!(r, Err(BurstError::Exists(_))),
        "never over another burst"
    );
    let r = prepare(out.path(), &[0]).start(spec("../up", vec![0]));
    assert!(matches!(r, Err(BurstError::BadId(_))));
    assert_eq!(entries(out.path()), vec!["taken"]);
}

#[test]
fn a_preparation_that_cannot_open_a_link_fails_and_leaves_nothing() {
    let out = tempfile::tempdir().unwrap();
    let r = PreparedBurst::<Box<dyn Sink>>::prepare(
        out.path(),
        &[0, 1],
        FRAME,
        4 * FRAME as usize,
        |link, path| {
            if link == 1 {
                return Err(snbuf_persist::PersistError::Config(
                    "no space for link 1".into(),
                ));
            }
            open(&SinkConfig::new(Method::Direct, path, 1 << 20))
        },
    );
    match r {
        Err(BurstError::Open { link: 1, .. }) => {}
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("a failed link was accepted"),
    }
    assert!(
        entries(out.path()).is_empty(),
        "the directory and link 0's file are removed"
    );
}

#[test]
fn preparations_of_dead_processes_are_removed() {
    let out = tempfile::tempdir().unwrap();
    // No process has this id (above any pid_max).
    let stale = out.path().join(".snbuf-next-999999999-0");
    std::fs::create_dir(&stale).unwrap();
    std::fs::write(stale.join("link-0000.dat"), b"").unwrap();
    let live = prepare(out.path(), &[0]);
    std::fs::create_dir(out.path().join("a-burst")).unwrap();
    assert_eq!(remove_stale(out.path()).unwrap(), 1);
    assert!(!stale.exists());
    assert!(
        live.dir().unwrap().exists(),
        "this process's own preparation stays"
    );
    assert!(out.path().join("a-burst").exists());
}

/// A burst's directory never appears under its name without its manifest: a unit killed
/// between the two would leave a directory its restart cannot tell from anyone's, and the
/// trigger it had taken recorded nowhere and said nowhere (a fleet trial found one). A watcher
/// looks for the directory without a manifest while bursts start, 20 times.
#[test]
fn a_started_burst_is_never_seen_without_its_manifest() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let out = tempfile::tempdir().unwrap();
    for n in 0..20 {
        let prepared = prepare(out.path(), &[0, 1]);
        let id = format!("b{n}");
        let dir = out.path().join(&id);
        let (stop, seen_bare) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let watcher = {
            let (stop, seen_bare, dir) = (stop.clone(), seen_bare.clone(), dir.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if dir.exists() && !dir.join("manifest.json").exists() {
                        seen_bare.store(true, Ordering::Relaxed);
                    }
                }
            })
        };
        let burst = prepared.start(spec(&id, vec![0, 1])).unwrap();
        stop.store(true, Ordering::Relaxed);
        watcher.join().unwrap();
        assert!(
            !seen_bare.load(Ordering::Relaxed),
            "burst {id} was seen under its name without a manifest"
        );
        drop(burst);
    }
}
