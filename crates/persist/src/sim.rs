//! A simulated medium for crash tests (SQLite's test6.c and redb's crash test are the models).
//!
//! It keeps a live image (what reads see) and a durable image (what survives a crash). Writes
//! land in the live image and in a list of pending writes; `persist` applies them to the durable
//! image. `crash` decides, with a seeded RNG, what became of each write that was never persisted:
//! dropped, kept, or torn (some sectors of a block device, some 8-byte words of mapped memory
//! made it, others not), and returns the durable image a recovery would find. Faults can be
//! injected on the N-th call: EIO or ENOSPC on a write, EIO on a persist (after which the pending
//! writes are lost from the durable image, as Linux drops dirty pages on a failed fsync).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crate::error::{PersistError, Result};
use crate::medium::Medium;
use crate::sink::{Durability, Sink, SinkReport};
use crate::Method;

/// Which real medium the simulation stands in for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SimKind {
    /// A block device: O_DIRECT-style aligned writes, torn at `sector_bytes`.
    Block { sector_bytes: u64 },
    /// Persistent memory: byte-addressable, torn at 8-byte words (the x86 failure-atomic unit).
    Mapped,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultOp {
    Write,
    Persist,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault {
    /// The fault fires on this call (1-based, counting writes and persists together).
    pub at_call: u64,
    pub op: FaultOp,
    /// errno to return: libc::EIO, libc::ENOSPC.
    pub errno: i32,
}

/// The state of a simulated medium, shared between the sink and the test that inspects it.
pub struct SimMedium {
    kind: SimKind,
    live: Vec<u8>,
    durable: Vec<u8>,
    pending: Vec<(u64, Vec<u8>)>,
    calls: u64,
    faults: Vec<Fault>,
    power_cut_at_call: Option<u64>,
}

impl SimMedium {
    /// From call `n` on (1-based), every write and persist fails and changes nothing: the power
    /// is gone. `crash` then says what the medium holds.
    pub fn cut_power_at_call(&mut self, n: u64) {
        self.power_cut_at_call = Some(n);
    }

    pub fn calls(&self) -> u64 {
        self.calls
    }

    pub fn durable(&self) -> &[u8] {
        &self.durable
    }

    pub fn live(&self) -> &[u8] {
        &self.live
    }

    /// The durable image after a crash now: each pending write dropped, kept or torn.
    pub fn crash(&self, seed: u64) -> Vec<u8> {
        let mut rng = snbuf_platform::rng::Rng::new(seed);
        let mut next = || rng.next_u64();
        let unit = match self.kind {
            SimKind::Block { sector_bytes } => sector_bytes as usize,
            SimKind::Mapped => 8,
        };
        let mut image = self.durable.clone();
        // Pending writes reach the medium in any order; apply each fate in a shuffled order so
        // a later write may survive while an earlier one does not.
        let mut order: Vec<usize> = (0..self.pending.len()).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, (next() % (i as u64 + 1)) as usize);
        }
        for i in order {
            let (offset, data) = &self.pending[i];
            let off = *offset as usize;
            debug_assert!(
                off + data.len() <= image.len(),
                "a pending write lies in the region"
            );
            match next() % 3 {
                0 => {} // dropped
                1 => image[off..off + data.len()].copy_from_slice(data),
                _ => {
                    for (k, piece) in data.chunks(unit).enumerate() {
                        if next() % 2 == 0 {
                            let at = off + k * unit;
                            image[at..at + piece.len()].copy_from_slice(piece);
                        }
                    }
                }
            }
        }
        assert_eq!(
            image.len(),
            self.durable.len(),
            "a crash neither grows nor shrinks the medium"
        );
        image
    }

    fn fault(&mut self, op: FaultOp) -> Option<i32> {
        self.calls += 1;
        let calls = self.calls;
        if self.power_cut_at_call.is_some_and(|n| calls >= n) {
            return Some(libc::EIO);
        }
        self.faults
            .iter()
            .find(|f| f.at_call == calls && f.op == op)
            .map(|f| f.errno)
    }
}

/// A `Sink` on a simulated medium.
pub struct SimSink {
    state: Arc<Mutex<SimMedium>>,
    region_bytes: u64,
    report: SinkReport,
}

impl SimSink {
    /// A zero-filled medium of `region_bytes`, and the handle a test keeps to crash it.
    pub fn new(
        kind: SimKind,
        region_bytes: u64,
        faults: Vec<Fault>,
    ) -> (Self, Arc<Mutex<SimMedium>>) {
        let state = Arc::new(Mutex::new(SimMedium {
            kind,
            live: vec![0; region_bytes as usize],
            durable: vec![0; region_bytes as usize],
            pending: Vec::new(),
            calls: 0,
            faults,
            power_cut_at_call: None,
        }));
        // The sink reports the method it stands in for, so writers take the same path (ordering,
        // alignment) as on the real medium.
        let (method, durability, alignment_bytes) = match kind {
            SimKind::Block { sector_bytes } => {
                (Method::Direct, Durability::Fdatasync, sector_bytes)
            }
            SimKind::Mapped => (Method::Nt, Durability::MapSync, 1),
        };
        assert!(
            alignment_bytes.is_power_of_two(),
            "a sector of {alignment_bytes} B: a power of two, as a real device's"
        );
        let sink = SimSink {
            state: state.clone(),
            region_bytes,
            report: SinkReport {
                method,
                path: PathBuf::from("sim"),
                region_bytes,
                medium: Medium {
                    fs_type: "sim".into(),
                    dax: matches!(kind, SimKind::Mapped),
                    volatile: false,
                    dio_offset_align_bytes: Some(alignment_bytes),
                    dio_mem_align_bytes: Some(alignment_bytes),
                },
                durability,
                alignment_bytes,
                instruction_path: "simulated".into(),
                pages: None,
                notes: vec![],
            },
        };
        (sink, state)
    }

    /// Names the file the simulated medium stands for (it appears in error messages).
    pub fn with_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.report.path = path.into();
        self
    }

    fn err(&self, op: &'static str, errno: i32) -> PersistError {
        PersistError::io(
            op,
            &self.report.path,
            std::io::Error::from_raw_os_error(errno),
        )
    }
}

impl Sink for SimSink {
    fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        let align = self.report.alignment_bytes;
        if !offset.is_multiple_of(align) {
            return Err(PersistError::Misaligned {
                offset,
                alignment_bytes: align,
            });
        }
        let padded = (data.len() as u64).div_ceil(align) * align;
        crate::backends::check_range(offset, padded as usize, self.region_bytes)?;
        let mut s = self.state.lock().expect("sim state");
        if let Some(errno) = s.fault(FaultOp::Write) {
            drop(s);
            return Err(self.err("write", errno));
        }
        let mut bytes = data.to_vec();
        bytes.resize(padded as usize, 0);
        debug_assert!(
            bytes.len() as u64 == padded && padded.is_multiple_of(align),
            "a write covers whole sectors"
        );
        let off = offset as usize;
        s.live[off..off + bytes.len()].copy_from_slice(&bytes);
        s.pending.push((offset, bytes));
        Ok(())
    }

    fn persist(&mut self) -> Result<()> {
        let mut s = self.state.lock().expect("sim state");
        if let Some(errno) = s.fault(FaultOp::Persist) {
            if s.power_cut_at_call.is_some_and(|n| s.calls >= n) {
                // No power: nothing happened; the crash decides what the pending writes became.
                drop(s);
                return Err(self.err("fdatasync", errno));
            }
            // Like a failed fsync on Linux: the dirty data is gone from the durable future.
            s.pending.clear();
            drop(s);
            return Err(self.err("fdatasync", errno));
        }
        let pending = std::mem::take(&mut s.pending);
        for (offset, data) in pending {
            let off = offset as usize;
            s.durable[off..off + data.len()].copy_from_slice(&data);
        }
        Ok(())
    }

    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<()> {
        crate::backends::check_range(offset, buf.len(), self.region_bytes)?;
        let s = self.state.lock().expect("sim state");
        debug_assert_eq!(
            s.live.len() as u64,
            self.region_bytes,
            "the medium is the region"
        );
        buf.copy_from_slice(&s.live[offset as usize..offset as usize + buf.len()]);
        Ok(())
    }

    fn report(&self) -> &SinkReport {
        &self.report
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_persisted_writes_are_certain_to_survive() {
        let (mut s, state) = SimSink::new(SimKind::Block { sector_bytes: 512 }, 8192, vec![]);
        s.write_at(0, &[1u8; 512]).unwrap();
        s.persist().unwrap();
        s.write_at(512, &[2u8; 1024]).unwrap();
        let st = state.lock().unwrap();
        let mut outcomes = std::collections::HashSet::new();
        for seed in 0..64 {
            let img = st.crash(seed);
            assert!(
                img[..512].iter().all(|&b| b == 1),
                "persisted data always survives"
            );
            outcomes.insert(img[512..1536].to_vec());
        }
        assert!(outcomes.len() >= 3, "dropped, kept and torn all happen");
    }

    #[test]
    fn injected_faults_fire_on_their_call() {
        let faults = vec![
            Fault {
                at_call: 2,
                op: FaultOp::Write,
                errno: libc::ENOSPC,
            },
            Fault {
                at_call: 4,
                op: FaultOp::Persist,
                errno: libc::EIO,
            },
        ];
        let (mut s, state) = SimSink::new(SimKind::Mapped, 4096, faults);
        s.write_at(0, b"a").unwrap();
        assert!(matches!(
            s.write_at(8, b"b"),
            Err(PersistError::NoSpace { .. })
        ));
        s.write_at(16, b"c").unwrap();
        assert!(s.persist().is_err());
        assert!(
            state.lock().unwrap().durable().iter().all(|&b| b == 0),
            "a failed fsync persisted nothing"
        );
    }
}
