//! Every method writes data that reads back identical — through the sink and through an
//! independent read of the file — at aligned and unaligned block sizes, in sequential and random
//! order, across several persist points.

use std::path::{Path, PathBuf};

use snbuf_persist::{open, Method, PageSize, SinkConfig, SyncMode};

/// /dev/shm stands in for persistent memory; the temp dir (on the root disk) for an SSD.
fn dir_for(method: Method) -> PathBuf {
    let shm = Path::new("/dev/shm");
    if method.capabilities().mapped && shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    snbuf_platform::rng::Rng::new(seed).bytes(len)
}

fn round_trip(method: Method, block: usize, random_order: bool, sync_mode: SyncMode) {
    let dir = tempfile::tempdir_in(dir_for(method)).unwrap();
    let path = dir.path().join("target.dat");
    let slots = 24usize;
    // Probe alignment through a first open, as the benchmark does.
    let mut config = SinkConfig::new(method, &path, 4 << 20);
    config.max_io_bytes = block;
    config.queue_depth = 4;
    config.sync_mode = sync_mode;
    let mut sink = open(&config).unwrap_or_else(|e| panic!("{method}: {e}"));
    let align = sink.report().alignment_bytes as usize;
    let slot = block.div_ceil(align) * align;
    assert!(slot * slots <= 4 << 20);

    let mut order: Vec<usize> = (0..slots).collect();
    if random_order {
        // A fixed permutation: deterministic, not sequential.
        order.sort_by_key(|&i| (i * 7919) % slots);
    }
    for (n, &i) in order.iter().enumerate() {
        sink.write_at((i * slot) as u64, &pattern(i as u64, block))
            .unwrap();
        if n % 5 == 4 {
            sink.persist().unwrap();
        }
    }
    sink.persist().unwrap();

    let mut buf = vec![0u8; block];
    for i in 0..slots {
        sink.read_at((i * slot) as u64, &mut buf).unwrap();
        assert!(
            buf == pattern(i as u64, block),
            "{method} block {block} slot {i}: sink read differs"
        );
    }
    drop(sink);

    let file = std::fs::read(&path).unwrap();
    for i in 0..slots {
        let got = &file[i * slot..i * slot + block];
        assert!(
            got == pattern(i as u64, block).as_slice(),
            "{method} block {block} slot {i}: file differs"
        );
        assert!(
            file[i * slot + block..(i + 1) * slot]
                .iter()
                .all(|&b| b == 0),
            "padding is zero"
        );
    }
}

/// Whether io_uring can be used here: without it a test skips it, saying why, unless
/// SNBUF_REQUIRE_URING is set (CI), where it fails.
fn uring_here() -> bool {
    snbuf_testkit::available_or_skip(
        "SNBUF_REQUIRE_URING",
        "io_uring",
        snbuf_persist::backends::uring::available(),
    )
}

/// The methods this build and kernel can run; a missing one is named, not silently passed over.
fn methods_here() -> Vec<Method> {
    Method::all()
        .filter(|m| m.compiled_in())
        .filter(|m| *m != Method::Uring || uring_here())
        .collect()
}

#[test]
fn every_method_reads_back_what_it_wrote() {
    for method in methods_here() {
        for block in [256usize, 4096, 5568, 65536] {
            for random_order in [false, true] {
                round_trip(method, block, random_order, SyncMode::Fdatasync);
            }
        }
    }
}

#[test]
fn block_methods_also_work_with_o_dsync() {
    for method in [Method::Direct, Method::Uring, Method::Buffered] {
        if !methods_here().contains(&method) {
            continue;
        }
        round_trip(method, 5568, false, SyncMode::Dsync);
    }
}

#[test]
fn huge_page_mappings_and_buffers_work() {
    for method in [Method::Nt, Method::Direct] {
        let dir = tempfile::tempdir_in(dir_for(method)).unwrap();
        let mut config = SinkConfig::new(method, dir.path().join("t"), 4 << 20);
        config.page_size = PageSize::Huge2M;
        let mut sink = open(&config).unwrap();
        let pages = sink.report().pages.expect("page facts recorded");
        assert!(pages.resident_bytes > 0);
        sink.write_at(0, &pattern(1, 8192)).unwrap();
        sink.persist().unwrap();
    }
}

#[test]
fn misuse_is_refused_without_writing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t");
    let mut sink = open(&SinkConfig::new(Method::Direct, &path, 1 << 20)).unwrap();
    let align = sink.report().alignment_bytes;
    assert!(sink.write_at(1, &[1, 2, 3]).is_err(), "misaligned offset");
    assert!(
        sink.write_at((1 << 20) - align, &vec![1u8; 2 * align as usize])
            .is_err(),
        "past the region"
    );
    assert!(
        sink.write_at(0, &vec![1u8; 2 << 20]).is_err(),
        "larger than max_io_bytes"
    );
    // None of that poisoned the sink.
    sink.write_at(0, b"fine").unwrap();
    sink.persist().unwrap();

    let mut zero = SinkConfig::new(Method::Nt, &path, 0);
    zero.region_bytes = 0;
    assert!(open(&zero).is_err());
}

#[test]
fn a_missing_or_read_only_directory_is_an_error() {
    for method in methods_here() {
        let err = open(&SinkConfig::new(method, "/nonexistent/snbuf/t", 1 << 20))
            .err()
            .expect("must fail");
        assert!(err.to_string().contains("/nonexistent/snbuf/t"), "{err}");
    }
    let dir = tempfile::tempdir().unwrap();
    let ro = dir.path().join("ro");
    std::fs::create_dir(&ro).unwrap();
    std::fs::set_permissions(&ro, std::os::unix::fs::PermissionsExt::from_mode(0o555)).unwrap();
    // root ignores directory permissions; only check where they apply.
    if std::fs::File::create(ro.join("probe")).is_err() {
        assert!(open(&SinkConfig::new(Method::Direct, ro.join("t"), 1 << 20)).is_err());
    } else {
        eprintln!("skip: running as root, a read-only directory is writable; see the read-only mount test");
    }
}

#[test]
fn pmdk_without_the_feature_says_how_to_get_it() {
    if Method::Pmdk.compiled_in() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let err = open(&SinkConfig::new(
        Method::Pmdk,
        dir.path().join("t"),
        1 << 20,
    ))
    .err()
    .unwrap();
    assert!(err.to_string().contains("--features pmdk"), "{err}");
}

/// `write_in_place`, as the recorder writes a chunk from its latency buffer: parts aligned in
/// address and length (sent from where they lie, no copy, on O_DIRECT and io_uring; the frames
/// that wrap around the ring's end are a second part), and unaligned parts (copied). Every method must put the
/// parts back to back and, once the call returned, no longer read them: the test overwrites them
/// at once and the file must still hold what they held during the call.
#[test]
fn parts_written_in_place_read_back_and_are_released_on_return() {
    use snbuf_persist::AlignedBuf;
    for method in methods_here() {
        let dir = tempfile::tempdir_in(dir_for(method)).unwrap();
        let path = dir.path().join("target.dat");
        let mut sink = open(&SinkConfig::new(method, &path, 4 << 20)).unwrap();
        let align = sink.report().alignment_bytes.max(512) as usize;
        let mut ring = AlignedBuf::new(64 * align, PageSize::Small4K).unwrap();
        ring.as_mut_slice().copy_from_slice(&pattern(7, 64 * align));
        let expected: Vec<u8> = ring.as_slice()[48 * align..]
            .iter()
            .chain(&ring.as_slice()[..8 * align])
            .copied()
            .collect();
        {
            let (head, tail) = ring.as_slice().split_at(48 * align);
            sink.write_in_place(0, &[tail, &head[..8 * align]])
                .unwrap_or_else(|e| panic!("{method}: {e}"));
        }
        // The caller's memory is its own again: the link overwrites it.
        ring.as_mut_slice().fill(0xEE);
        // Unaligned parts (3 frames of 1000 B from a Vec): on memory two parts back to back, on
        // block devices one (every part but the last must be whole blocks there, as for
        // `write_at`), padded in a copy.
        let odd = pattern(9, 3000);
        let at = (24 * align) as u64;
        let parts: Vec<&[u8]> = if method.capabilities().mapped {
            vec![&odd[..1000], &odd[1000..]]
        } else {
            vec![&odd[..]]
        };
        sink.write_in_place(at, &parts)
            .unwrap_or_else(|e| panic!("{method}: {e}"));
        sink.persist().unwrap();
        drop(sink);
        let file = std::fs::read(&path).unwrap();
        assert!(
            file[..24 * align] == expected[..],
            "{method}: aligned parts differ"
        );
        assert!(
            file[at as usize..at as usize + 3000] == odd[..],
            "{method}: unaligned parts differ"
        );
    }
}

/// Whatever the method, the CRC that comes back with a write is the CRC-32C of the bytes the file
/// holds afterwards: on `nt` taken from the copy's own registers (`nt_crc`), elsewhere from the
/// parts after the write; through the latch the recorder wraps every sink in, too.
#[test]
fn a_checksummed_write_returns_the_crc_of_what_landed() {
    use snbuf_persist::{AlignedBuf, Latched, Sink};
    for method in methods_here() {
        let dir = tempfile::tempdir_in(dir_for(method)).unwrap();
        let path = dir.path().join("target.dat");
        let mut sink = Latched::new(open(&SinkConfig::new(method, &path, 4 << 20)).unwrap());
        let align = sink.report().alignment_bytes.max(512) as usize;
        let mut ring = AlignedBuf::new(64 * align, PageSize::Small4K).unwrap();
        ring.as_mut_slice()
            .copy_from_slice(&pattern(11, 64 * align));
        // Whole blocks that wrap around the ring's end: two parts.
        let (head, tail) = ring.as_slice().split_at(40 * align);
        let parts = [tail, &head[..8 * align]];
        let crc = sink
            .write_in_place_checksummed(0, &parts)
            .unwrap_or_else(|e| panic!("{method}: {e}"));
        let len = 32 * align;
        let mut odd_crc = None;
        // On memory also parts of any length at any offset (frames of 5568 B, the head and
        // tail of the copy not on cache lines).
        let odd = pattern(12, 3 * 5568 + 13);
        if method.capabilities().mapped {
            let got = sink
                .write_in_place_checksummed(len as u64 + 7, &[&odd[..5568], &odd[5568..]])
                .unwrap();
            odd_crc = Some(got);
        }
        sink.persist().unwrap();
        drop(sink);
        let file = std::fs::read(&path).unwrap();
        assert_eq!(
            crc,
            crc32c::crc32c(&file[..len]),
            "{method}: CRC of the aligned parts"
        );
        assert_eq!(
            crc,
            crc32c::crc32c(&[tail, &head[..8 * align]].concat()),
            "{method}"
        );
        if let Some(got) = odd_crc {
            let at = len + 7;
            assert!(
                file[at..at + odd.len()] == odd[..],
                "{method}: odd parts differ"
            );
            assert_eq!(got, crc32c::crc32c(&odd), "{method}: CRC of the odd parts");
        }
    }
}

/// A buffer the sinks may go on reading after `start_in_place` returned: they hold it.
struct Held(snbuf_persist::AlignedBuf);

impl snbuf_platform::HeldMemory for Held {
    fn address_range(&self) -> std::ops::Range<usize> {
        let start = self.0.as_slice().as_ptr() as usize;
        start..start + self.0.len()
    }
}

/// One thread, two files, both writes in flight (io_uring) before either is waited for, and
/// both flushes in flight before either is finished: each file holds what was written, on every
/// method. Parts outside the held memory are written before `start_in_place` returns, so their
/// memory may be reused at once.
#[test]
fn writes_and_persists_started_on_two_files_land_once_finished() {
    use snbuf_platform::HeldMemory;
    use std::sync::Arc;
    for method in methods_here() {
        let dir = tempfile::tempdir_in(dir_for(method)).unwrap();
        let paths = [dir.path().join("a.dat"), dir.path().join("b.dat")];
        let mut sinks: Vec<_> = paths
            .iter()
            .map(|p| open(&SinkConfig::new(method, p, 4 << 20)).unwrap())
            .collect();
        let align = sinks[0].report().alignment_bytes.max(512) as usize;
        let mut buf = snbuf_persist::AlignedBuf::new(32 * align, PageSize::Small4K).unwrap();
        buf.as_mut_slice().copy_from_slice(&pattern(11, 32 * align));
        let expected = buf.as_slice().to_vec();
        let owner = Arc::new(Held(buf));
        let bytes = owner.0.as_slice();
        let held: Arc<dyn HeldMemory> = owner.clone();
        let mut elsewhere = pattern(12, 2 * align);
        let others = elsewhere.clone();
        for (k, sink) in sinks.iter_mut().enumerate() {
            let half = &bytes[k * 16 * align..(k + 1) * 16 * align];
            sink.start_in_place(0, &[&half[..8 * align], &half[8 * align..]], &held)
                .unwrap_or_else(|e| panic!("{method}: {e}"));
            sink.start_in_place((16 * align) as u64, &[&elsewhere[..]], &held)
                .unwrap_or_else(|e| panic!("{method}: {e}"));
        }
        elsewhere.fill(0xEE);
        for sink in &mut sinks {
            sink.wait_in_place().unwrap();
            sink.start_persist().unwrap();
        }
        for sink in &mut sinks {
            sink.finish_persist().unwrap();
        }
        drop(sinks);
        for (k, path) in paths.iter().enumerate() {
            let file = std::fs::read(path).unwrap();
            assert!(
                file[..16 * align] == expected[k * 16 * align..(k + 1) * 16 * align],
                "{method}: file {k} differs"
            );
            assert!(
                file[16 * align..18 * align] == others[..],
                "{method}: file {k}: the part from unheld memory differs"
            );
        }
    }
}

/// A sink dropped and its file removed: the file system has the space back at once. (io_uring
/// holds the file through its registered-file table, released by the kernel later unless the
/// sink unregisters it: the room a burst found right after removing a preparation that did not
/// fit came out a fraction of the disk's real room.)
#[test]
fn a_dropped_sinks_file_gives_its_space_back_at_once() {
    const FILE_BYTES: u64 = 1 << 30;
    // Other tests write beside this one; a held file would keep all of FILE_BYTES.
    const SLACK_BYTES: u64 = 128 << 20;
    for method in methods_here()
        .into_iter()
        .filter(|m| !m.capabilities().mapped)
    {
        let dir = tempfile::tempdir().unwrap();
        let free = || snbuf_persist::medium::free_bytes(dir.path()).unwrap();
        if free() < 4 * FILE_BYTES {
            eprintln!("skip {method}: less than 4 GiB free in the temp dir");
            continue;
        }
        let before = free();
        let path = dir.path().join("target.dat");
        let mut sink = open(&SinkConfig::new(method, &path, FILE_BYTES)).unwrap();
        sink.write_at(0, &pattern(3, 4096)).unwrap();
        sink.persist().unwrap();
        assert!(
            free() + FILE_BYTES - SLACK_BYTES < before,
            "{method}: the file was allocated"
        );
        drop(sink);
        std::fs::remove_file(&path).unwrap();
        let after = free();
        assert!(
            after + SLACK_BYTES >= before,
            "{method}: {} MiB not given back",
            (before - after) >> 20
        );
    }
}

/// Memory that claims addresses nothing is mapped at: the kernel refuses to register it.
struct Unmapped;

impl snbuf_platform::HeldMemory for Unmapped {
    fn address_range(&self) -> std::ops::Range<usize> {
        // The bottom of the address space is never mapped (mmap_min_addr).
        4096..4096 + (2 << 20)
    }
}

/// io_uring writes a latency buffer it registered ahead (fixed buffers) and reads back what was
/// written, wrapped parts included; a source the kernel refuses is said so in the notes and the
/// writes still land, from where they lie.
#[test]
fn io_uring_writes_from_a_registered_source_or_says_why_not() {
    use snbuf_persist::backends::uring::SOURCE_NOT_REGISTERED;
    use snbuf_persist::sink::{HeldMemory, SourceMemory};
    use snbuf_persist::AlignedBuf;
    if !uring_here() {
        return;
    }
    let mut ring = AlignedBuf::new(64 << 12, PageSize::Small4K).unwrap();
    ring.as_mut_slice().copy_from_slice(&pattern(21, 64 << 12));
    let held: std::sync::Arc<dyn HeldMemory> = std::sync::Arc::new(Held(ring));
    let range = held.address_range();
    // SAFETY: the ring's memory, alive as long as `held`; nothing writes it while this exists.
    let bytes = unsafe { std::slice::from_raw_parts(range.start as *const u8, range.len()) };
    let parts = [&bytes[48 << 12..], &bytes[..8 << 12]];
    let expected = [parts[0], parts[1]].concat();
    let sources: [std::sync::Arc<dyn HeldMemory>; 2] =
        [held.clone(), std::sync::Arc::new(Unmapped)];
    for (registered, source) in [true, false].into_iter().zip(sources) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("target.dat");
        let mut config = SinkConfig::new(Method::Uring, &path, 4 << 20);
        config.source = Some(SourceMemory(source));
        let mut sink = open(&config).unwrap();
        let notes = sink.report().notes.join("; ");
        assert_eq!(
            !notes.contains(SOURCE_NOT_REGISTERED),
            registered,
            "{notes}"
        );
        sink.start_in_place(0, &parts, &held).unwrap();
        sink.wait_in_place().unwrap();
        sink.write_in_place(24 << 12, &[&bytes[..4 << 12]]).unwrap();
        sink.persist().unwrap();
        drop(sink);
        let file = std::fs::read(&path).unwrap();
        assert!(file[..24 << 12] == expected[..], "registered {registered}");
        assert!(
            file[24 << 12..28 << 12] == bytes[..4 << 12],
            "registered {registered}"
        );
    }
}

/// A region grown while open takes writes past its old end, which read back through the sink
/// and from the file; the old bytes stay; a write past the new end is still refused; a method
/// that cannot grow says so and keeps its region.
#[test]
fn a_grown_region_takes_writes_past_its_old_end() {
    for method in methods_here() {
        let dir = tempfile::tempdir_in(dir_for(method)).unwrap();
        let path = dir.path().join("target.dat");
        let old = 2u64 << 20;
        let mut config = SinkConfig::new(method, &path, old);
        config.max_io_bytes = 65536;
        let mut sink = open(&config).unwrap_or_else(|e| panic!("{method}: {e}"));
        let first = pattern(1, 65536);
        sink.write_at(0, &first).unwrap();
        assert!(
            sink.write_at(old, &first).is_err(),
            "{method}: past the end"
        );
        match sink.grow(2 * old) {
            Ok(()) => {}
            Err(snbuf_persist::PersistError::Unsupported { .. }) => {
                assert_eq!(sink.report().region_bytes, old, "{method}");
                continue;
            }
            Err(e) => panic!("{method}: grow: {e}"),
        }
        assert_eq!(sink.report().region_bytes, 2 * old, "{method}");
        let second = pattern(2, 65536);
        sink.write_at(old + 65536, &second).unwrap();
        sink.persist().unwrap();
        assert!(
            sink.write_at(2 * old, &second).is_err(),
            "{method}: past the new end"
        );
        let mut buf = vec![0u8; 65536];
        sink.read_at(0, &mut buf).unwrap();
        assert!(buf == first, "{method}: the old bytes changed");
        sink.read_at(old + 65536, &mut buf).unwrap();
        assert!(buf == second, "{method}: sink read differs");
        drop(sink);
        let file = std::fs::read(&path).unwrap();
        assert!(file.len() as u64 >= 2 * old, "{method}: {}", file.len());
        assert!(&file[(old + 65536) as usize..][..65536] == second.as_slice());
    }
}
