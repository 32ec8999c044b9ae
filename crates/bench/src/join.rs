//! `snbuf bench join` (Yoshioka et al.): a hash join whose hash table lives in DRAM or on the
//! target's mapping.
//!
//! Tables: R(key u64 unique, value [u8; 16]) and S(key u64 unique, value [i32; 16], id u64 →
//! R.key); 7 of every 8 S rows reference an R row, the others reference no key of R. Build: the
//! threads insert R into a chained hash table under one giant lock, for each lock type (pthread
//! spinlock, pthread mutex, test-and-set spinlock, add-and-fetch + pause ticket lock). Probe: the
//! threads look every S row up, lock-free, and sum a checksum over the matches. The expected
//! count and checksum follow from how the rows were generated, not from the join: a join that
//! returns anything else is marked wrong in its result.

use std::cell::UnsafeCell;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use snbuf_platform::memory::{AlignedBuf, FileMapping, PageSize};

use crate::latency::{map_target, RemoveOnDrop};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LockKind {
    PthreadSpinlock,
    PthreadMutex,
    TestAndSet,
    AddFetchPause,
}

pub const ALL_LOCKS: [LockKind; 4] = [
    LockKind::PthreadSpinlock,
    LockKind::PthreadMutex,
    LockKind::TestAndSet,
    LockKind::AddFetchPause,
];

impl LockKind {
    pub fn name(self) -> &'static str {
        match self {
            LockKind::PthreadSpinlock => "pthread_spinlock",
            LockKind::PthreadMutex => "pthread_mutex",
            LockKind::TestAndSet => "test_and_set",
            LockKind::AddFetchPause => "add_fetch_pause",
        }
    }
}

#[derive(Clone, Debug)]
pub struct JoinConfig {
    pub r_rows: u64,
    pub s_rows: u64,
    pub threads: Vec<usize>,
    pub locks: Vec<LockKind>,
    /// Where the hash table lives: None for DRAM, or a directory/file to map.
    pub target: Option<PathBuf>,
    pub page_size: PageSize,
}

/// One phase of the hash join at one thread count. A field an older version did not write reads
/// as zero or empty (a missing `verified` as a failed check).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct JoinResult {
    /// `build` or `probe`.
    pub phase: String,
    /// The giant lock of the build phase (probes take none).
    pub lock: Option<LockKind>,
    pub threads: usize,
    /// `dram` or `target`.
    pub placement: String,
    pub target: String,
    pub rows: u64,
    pub seconds: f64,
    pub mtuples_per_s: f64,
    /// Probe: matches and checksum found, beside those the generator implies.
    pub matches: Option<u64>,
    pub expected_matches: Option<u64>,
    pub checksum: Option<u64>,
    pub expected_checksum: Option<u64>,
    /// The result checked out (build: every R row reachable in the table; probe: count and
    /// checksum as expected).
    pub verified: bool,
    pub notes: Vec<String>,
}

/// A bijection on u64 (splitmix64's finaliser): unique keys from unique indexes.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

struct RRow {
    key: u64,
    value: [u8; 16],
}

struct SRow {
    key: u64,
    value: [i32; 16],
    id: u64,
}

/// R row `i`: its key, and a value carrying `i` (read back by the probe).
fn r_row(i: u64) -> RRow {
    let mut value = [0u8; 16];
    value[..8].copy_from_slice(&i.to_le_bytes());
    value[8..].copy_from_slice(&(!i).to_le_bytes());
    RRow { key: mix(i), value }
}

/// S row `j`: 7 in 8 reference R row `j * 7919 % r_rows`; the rest a key R does not hold.
fn s_row(j: u64, r_rows: u64) -> SRow {
    let mut value = [0i32; 16];
    for (k, v) in value.iter_mut().enumerate() {
        *v = (j as i32).wrapping_add(k as i32);
    }
    let id = if j % 8 == 7 {
        mix(r_rows + j) // beyond R's indexes: unique, never an R key
    } else {
        mix(j.wrapping_mul(7919) % r_rows)
    };
    SRow {
        key: mix(u64::MAX - j),
        value,
        id,
    }
}

/// What one matching pair adds to the checksum: R's row index (from its value) and S's value.
fn pair_sum(r_value: &[u8; 16], s: &SRow) -> u64 {
    let ri = u64::from_le_bytes(r_value[..8].try_into().expect("8 bytes"));
    ri.wrapping_mul(31).wrapping_add(
        s.value
            .iter()
            .map(|&v| v as i64 as u64)
            .fold(0, u64::wrapping_add),
    )
}

/// The matches and checksum the generator implies.
fn expected(r_rows: u64, s_rows: u64) -> (u64, u64) {
    let mut n = 0;
    let mut sum = 0u64;
    for j in 0..s_rows {
        if j % 8 != 7 {
            let s = s_row(j, r_rows);
            let ri = j.wrapping_mul(7919) % r_rows;
            n += 1;
            sum = sum.wrapping_add(pair_sum(&r_row(ri).value, &s));
        }
    }
    (n, sum)
}

/// A node of a bucket's chain: 32 bytes.
#[repr(C)]
struct Node {
    key: u64,
    value: [u8; 16],
    /// Index + 1 of the next node; 0 ends the chain.
    next: u64,
}

/// The hash table, laid out in one region: bucket heads, then nodes.
struct HashTable {
    base: *mut u8,
    buckets: usize,
    capacity: usize,
}

// SAFETY: writers are serialised by the build's giant lock; probes only read after the build.
unsafe impl Sync for HashTable {}

impl HashTable {
    fn bytes_for(rows: u64) -> (usize, usize) {
        let buckets = (rows as usize).next_power_of_two();
        (
            buckets,
            buckets * 8 + rows as usize * std::mem::size_of::<Node>(),
        )
    }

    fn heads(&self) -> *mut u64 {
        self.base as *mut u64
    }

    fn node(&self, i: usize) -> *mut Node {
        debug_assert!(i < self.capacity);
        // SAFETY: the node array follows the heads, inside the region.
        unsafe { (self.base.add(self.buckets * 8) as *mut Node).add(i) }
    }

    fn clear(&self) {
        // SAFETY: the heads are inside the region.
        unsafe { std::ptr::write_bytes(self.heads(), 0, self.buckets) };
    }

    /// Inserts `r` as node `i`. Caller holds the giant lock.
    ///
    /// # Safety
    /// The caller holds the giant lock (no other writer), and `i` is a free node below the
    /// table's capacity.
    unsafe fn insert(&self, i: usize, r: &RRow) {
        let b = (mix(r.key) as usize) & (self.buckets - 1);
        // SAFETY: b < buckets, so the head is inside the region; the lock makes this thread the
        // only one touching heads and nodes.
        unsafe {
            let head = self.heads().add(b);
            self.node(i).write(Node {
                key: r.key,
                value: r.value,
                next: *head,
            });
            *head = i as u64 + 1;
        }
    }

    fn lookup(&self, key: u64) -> Option<&[u8; 16]> {
        let b = (mix(key) as usize) & (self.buckets - 1);
        // SAFETY: read-only after the build; indexes come from the table itself.
        unsafe {
            let mut at = *self.heads().add(b);
            while at != 0 {
                let n = &*self.node(at as usize - 1);
                if n.key == key {
                    return Some(&n.value);
                }
                at = n.next;
            }
        }
        None
    }

    /// Nodes reachable from the heads.
    fn reachable(&self) -> u64 {
        let mut n = 0;
        for b in 0..self.buckets {
            // SAFETY: as in `lookup`.
            let mut at = unsafe { *self.heads().add(b) };
            while at != 0 {
                n += 1;
                // SAFETY: as in `lookup`: indexes come from the table itself.
                at = unsafe { (*self.node(at as usize - 1)).next };
            }
        }
        n
    }
}

/// The giant lock, one implementation per kind.
enum GiantLock {
    Spin(UnsafeCell<libc::pthread_spinlock_t>),
    Mutex(UnsafeCell<libc::pthread_mutex_t>),
    Tas(AtomicBool),
    Ticket { next: AtomicU32, serving: AtomicU32 },
}

// SAFETY: the pthread locks are made for sharing between threads; they are never moved after init
// (the lock is boxed before `init`).
unsafe impl Sync for GiantLock {}

impl GiantLock {
    fn new(kind: LockKind) -> Box<GiantLock> {
        let l = Box::new(match kind {
            LockKind::PthreadSpinlock => GiantLock::Spin(UnsafeCell::new(0)),
            LockKind::PthreadMutex => {
                GiantLock::Mutex(UnsafeCell::new(libc::PTHREAD_MUTEX_INITIALIZER))
            }
            LockKind::TestAndSet => GiantLock::Tas(AtomicBool::new(false)),
            LockKind::AddFetchPause => GiantLock::Ticket {
                next: AtomicU32::new(0),
                serving: AtomicU32::new(0),
            },
        });
        if let GiantLock::Spin(s) = &*l {
            // SAFETY: initialising our own, not yet shared, spinlock in place.
            unsafe { libc::pthread_spin_init(s.get(), libc::PTHREAD_PROCESS_PRIVATE) };
        }
        l
    }

    fn with<T>(&self, f: impl FnOnce() -> T) -> T {
        match self {
            // SAFETY: the locks were initialised in `new` and are unlocked by this thread below.
            GiantLock::Spin(s) => unsafe { libc::pthread_spin_lock(s.get()) },
            // SAFETY: as for the spinlock.
            GiantLock::Mutex(m) => unsafe { libc::pthread_mutex_lock(m.get()) },
            GiantLock::Tas(b) => {
                while b.swap(true, Ordering::Acquire) {}
                0
            }
            GiantLock::Ticket { next, serving } => {
                let me = next.fetch_add(1, Ordering::Relaxed);
                while serving.load(Ordering::Acquire) != me {
                    std::hint::spin_loop();
                }
                0
            }
        };
        let v = f();
        match self {
            // SAFETY: held by this thread.
            GiantLock::Spin(s) => unsafe { libc::pthread_spin_unlock(s.get()) },
            // SAFETY: held by this thread.
            GiantLock::Mutex(m) => unsafe { libc::pthread_mutex_unlock(m.get()) },
            GiantLock::Tas(b) => {
                b.store(false, Ordering::Release);
                0
            }
            GiantLock::Ticket { serving, .. } => {
                serving.fetch_add(1, Ordering::Release);
                0
            }
        };
        v
    }
}

impl Drop for GiantLock {
    fn drop(&mut self) {
        match self {
            // SAFETY: nobody holds or waits on the lock any more.
            GiantLock::Spin(s) => unsafe {
                libc::pthread_spin_destroy(s.get());
            },
            // SAFETY: as for the spinlock.
            GiantLock::Mutex(m) => unsafe {
                libc::pthread_mutex_destroy(m.get());
            },
            _ => {}
        }
    }
}

enum TableMemory {
    Dram(AlignedBuf),
    File {
        mapping: FileMapping,
        _temp_file: Option<RemoveOnDrop>,
    },
}

/// Runs the build for every lock and thread count, then the probe for every thread count.
/// Steps `run` reports progress for: a build per lock and a probe, at each thread count.
pub fn steps(config: &JoinConfig) -> u64 {
    ((config.locks.len() + 1) * config.threads.len()) as u64
}

/// The build under each lock and the probe, at each thread count, over one table and one pair
/// of inputs, in the order the paper describes them; each result checked.
pub fn run(
    config: &JoinConfig,
    mut progress: impl FnMut(&str),
) -> std::io::Result<Vec<JoinResult>> {
    if config.r_rows == 0 || config.s_rows == 0 || config.threads.contains(&0) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "rows and threads must be more than 0",
        ));
    }
    let (buckets, bytes) = HashTable::bytes_for(config.r_rows);
    let (region, placement, target) = table_region(config, bytes)?;
    let base = match &region {
        TableMemory::Dram(b) => b.as_ptr() as *mut u8,
        TableMemory::File { mapping, .. } => mapping.as_ptr(),
    };
    let table = HashTable {
        base,
        buckets,
        capacity: config.r_rows as usize,
    };
    let r: Vec<RRow> = (0..config.r_rows).map(r_row).collect();
    let s: Vec<SRow> = (0..config.s_rows)
        .map(|j| s_row(j, config.r_rows))
        .collect();
    let (want_matches, want_sum) = expected(config.r_rows, config.s_rows);
    let mut out = Vec::new();
    let result = |phase: &str, lock, threads, rows, secs: f64| JoinResult {
        phase: phase.into(),
        lock,
        threads,
        placement: placement.into(),
        target: target.clone(),
        rows,
        seconds: secs,
        mtuples_per_s: rows as f64 / secs / 1e6,
        matches: None,
        expected_matches: None,
        checksum: None,
        expected_checksum: None,
        verified: false,
        notes: vec![],
    };
    for &lock in &config.locks {
        for &threads in &config.threads {
            let secs = timed_build(&table, &r, lock, threads);
            let mut res = result("build", Some(lock), threads, config.r_rows, secs);
            let reachable = table.reachable();
            res.verified = reachable == config.r_rows;
            if !res.verified {
                res.notes.push(format!(
                    "WRONG: {reachable} of {} rows reachable after the build",
                    config.r_rows
                ));
            }
            out.push(res);
            progress(&format!("join build {} x{threads}", lock.name()));
        }
    }
    if config.locks.is_empty() {
        // The probe needs a table: build it on one thread without timing it.
        table.clear();
        for (i, row) in r.iter().enumerate() {
            // SAFETY: single-threaded.
            unsafe { table.insert(i, row) };
        }
    }
    for &threads in &config.threads {
        let (secs, n, sum) = timed_probe(&table, &s, threads);
        let mut res = result("probe", None, threads, config.s_rows, secs);
        res.matches = Some(n);
        res.expected_matches = Some(want_matches);
        res.checksum = Some(sum);
        res.expected_checksum = Some(want_sum);
        res.verified = n == want_matches && sum == want_sum;
        if !res.verified {
            res.notes.push(format!(
                "WRONG RESULT: {n} matches (checksum {sum}), expected {want_matches} ({want_sum})"
            ));
        }
        out.push(res);
        progress(&format!("join probe x{threads}"));
    }
    drop(region);
    assert_eq!(out.len() as u64, steps(config), "a result per step");
    Ok(out)
}

/// Where the table lives, `bytes` of it: anonymous memory (DRAM) or the target's mapping; with
/// the placement's name and what it is.
fn table_region(
    config: &JoinConfig,
    bytes: usize,
) -> std::io::Result<(TableMemory, &'static str, String)> {
    Ok(match &config.target {
        None => (
            TableMemory::Dram(AlignedBuf::new(bytes, config.page_size)?),
            "dram",
            "anonymous memory".to_string(),
        ),
        Some(t) => {
            let (m, guard) = map_target(t, bytes, config.page_size)?;
            (
                TableMemory::File {
                    mapping: m,
                    _temp_file: guard,
                },
                "target",
                t.display().to_string(),
            )
        }
    })
}

/// Builds the table from `r` on `threads` threads under one giant `lock`; the seconds it took.
fn timed_build(table: &HashTable, r: &[RRow], lock: LockKind, threads: usize) -> f64 {
    assert!(threads > 0, "a build runs on some threads");
    table.clear();
    let giant = GiantLock::new(lock);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let t0 = Instant::now();
    std::thread::scope(|sc| {
        for part in r.chunks(r.len().div_ceil(threads)) {
            let (giant, next) = (&giant, &next);
            sc.spawn(move || {
                for row in part {
                    giant.with(|| {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        // SAFETY: under the giant lock; `i` < capacity (one per row).
                        unsafe { table.insert(i, row) };
                    });
                }
            });
        }
    });
    t0.elapsed().as_secs_f64()
}

/// Probes the table with `s` on `threads` threads, lock-free: the seconds it took, the matches
/// and their checksum.
fn timed_probe(table: &HashTable, s: &[SRow], threads: usize) -> (f64, u64, u64) {
    assert!(threads > 0, "a probe runs on some threads");
    let t0 = Instant::now();
    let parts: Vec<(u64, u64)> = std::thread::scope(|sc| {
        let handles: Vec<_> = s
            .chunks(s.len().div_ceil(threads))
            .map(|part| {
                sc.spawn(move || {
                    let (mut n, mut sum) = (0u64, 0u64);
                    for row in part {
                        if let Some(v) = table.lookup(row.id) {
                            n += 1;
                            sum = sum.wrapping_add(pair_sum(v, row));
                        }
                        std::hint::black_box(row.key);
                    }
                    (n, sum)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("probe thread"))
            .collect()
    });
    let secs = t0.elapsed().as_secs_f64();
    let (n, sum) = parts
        .iter()
        .fold((0u64, 0u64), |(a, b), (n, s)| (a + n, b.wrapping_add(*s)));
    (secs, n, sum)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_unique_and_the_expected_result_is_what_a_naive_join_finds() {
        let (r_rows, s_rows) = (1000, 3000);
        let r: std::collections::HashMap<u64, u64> =
            (0..r_rows).map(|i| (r_row(i).key, i)).collect();
        assert_eq!(r.len() as u64, r_rows);
        let s_keys: std::collections::HashSet<u64> =
            (0..s_rows).map(|j| s_row(j, r_rows).key).collect();
        assert_eq!(s_keys.len() as u64, s_rows);
        let (mut n, mut sum) = (0, 0u64);
        for j in 0..s_rows {
            let s = s_row(j, r_rows);
            if let Some(&i) = r.get(&s.id) {
                n += 1;
                sum = sum.wrapping_add(pair_sum(&r_row(i).value, &s));
            }
        }
        assert_eq!((n, sum), expected(r_rows, s_rows));
        assert_eq!(n, s_rows - s_rows / 8);
    }

    #[test]
    fn every_lock_builds_a_table_the_probe_joins_correctly_in_dram_and_on_a_file() {
        let dir = tempfile::tempdir().unwrap();
        for target in [None, Some(dir.path().to_path_buf())] {
            let config = JoinConfig {
                r_rows: 5000,
                s_rows: 12_000,
                threads: vec![1, 3],
                locks: ALL_LOCKS.to_vec(),
                target,
                page_size: PageSize::Small4K,
            };
            let r = run(&config, |_| {}).unwrap();
            assert_eq!(r.len(), 4 * 2 + 2);
            for x in &r {
                assert!(x.verified, "{x:?}");
                assert!(x.mtuples_per_s > 0.0);
            }
        }
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
