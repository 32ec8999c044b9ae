//! The CPU: which store and flush instructions it has, and pinning threads to cores.
//!
//! Detection is done once, at run time, from CPUID (through `is_x86_feature_detected!`), so one
//! binary runs the widest path on every x86-64 machine it lands on.

use std::fmt;
use std::io;

/// The vector width used for non-temporal stores.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SimdPath {
    /// 64-byte VMOVNTDQ (zmm).
    Avx512,
    /// 32-byte VMOVNTDQ (ymm).
    Avx2,
    /// 16-byte MOVNTDQ (xmm); every x86-64 CPU has it.
    Sse2,
}

impl SimdPath {
    pub fn name(self) -> &'static str {
        match self {
            SimdPath::Avx512 => "avx512",
            SimdPath::Avx2 => "avx2",
            SimdPath::Sse2 => "sse2",
        }
    }
}

impl fmt::Display for SimdPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The cache-line write-back instructions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushInstr {
    Clwb,
    Clflushopt,
    Clflush,
}

impl FlushInstr {
    pub fn name(self) -> &'static str {
        match self {
            FlushInstr::Clwb => "clwb",
            FlushInstr::Clflushopt => "clflushopt",
            FlushInstr::Clflush => "clflush",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuFeatures {
    pub avx512f: bool,
    pub avx2: bool,
    pub sse2: bool,
    pub clwb: bool,
    pub clflushopt: bool,
    pub clflush: bool,
}

impl CpuFeatures {
    #[cfg(target_arch = "x86_64")]
    pub fn detect() -> Self {
        CpuFeatures {
            avx512f: std::arch::is_x86_feature_detected!("avx512f"),
            avx2: std::arch::is_x86_feature_detected!("avx2"),
            sse2: std::arch::is_x86_feature_detected!("sse2"),
            clwb: cpuid_leaf7_ebx() & (1 << 24) != 0,
            clflushopt: cpuid_leaf7_ebx() & (1 << 23) != 0,
            // CLFLUSH is architectural on x86-64 (CPUID.01H:EDX[19] on every 64-bit part).
            clflush: true,
        }
    }

    #[cfg(not(target_arch = "x86_64"))]
    pub fn detect() -> Self {
        CpuFeatures {
            avx512f: false,
            avx2: false,
            sse2: false,
            clwb: false,
            clflushopt: false,
            clflush: false,
        }
    }

    /// The widest non-temporal store path, or None off x86-64.
    pub fn simd_path(&self) -> Option<SimdPath> {
        if self.avx512f {
            Some(SimdPath::Avx512)
        } else if self.avx2 {
            Some(SimdPath::Avx2)
        } else if self.sse2 {
            Some(SimdPath::Sse2)
        } else {
            None
        }
    }

    pub fn has(&self, instr: FlushInstr) -> bool {
        match instr {
            FlushInstr::Clwb => self.clwb,
            FlushInstr::Clflushopt => self.clflushopt,
            FlushInstr::Clflush => self.clflush,
        }
    }

    /// The cheapest flush the CPU has: CLWB keeps the line cached, CLFLUSHOPT evicts it but is
    /// weakly ordered, CLFLUSH evicts and serialises.
    pub fn best_flush(&self) -> Option<FlushInstr> {
        [
            FlushInstr::Clwb,
            FlushInstr::Clflushopt,
            FlushInstr::Clflush,
        ]
        .into_iter()
        .find(|f| self.has(*f))
    }

    /// Names of the persistence-relevant flags present, for the results' machine record.
    pub fn flag_names(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        for (on, name) in [
            (self.sse2, "sse2"),
            (self.avx2, "avx2"),
            (self.avx512f, "avx512f"),
            (self.clflush, "clflush"),
            (self.clflushopt, "clflushopt"),
            (self.clwb, "clwb"),
        ] {
            if on {
                v.push(name);
            }
        }
        v
    }
}

/// CPUID.(EAX=07H,ECX=0):EBX, where CLFLUSHOPT (bit 23) and CLWB (bit 24) are reported; the
/// standard library's detection macro does not know these two.
#[cfg(target_arch = "x86_64")]
fn cpuid_leaf7_ebx() -> u32 {
    use std::arch::x86_64::{__cpuid, __cpuid_count};
    // CPUID is available on every x86-64 CPU; leaf 7 is only read when the max leaf allows.
    if __cpuid(0).eax < 7 {
        return 0;
    }
    __cpuid_count(7, 0).ebx
}

/// Why a CPU list does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CpuListError {
    #[error("'{part}' in CPU list '{list}' is not a CPU number")]
    NotANumber { part: String, list: String },
    #[error("range '{part}' in CPU list '{list}' runs backwards")]
    Backwards { part: String, list: String },
    #[error("CPU list '{0}' names no CPU")]
    Empty(String),
}

/// Parses a CPU list as the kernel writes it: `0-3,8,10-11`.
pub fn parse_cpu_list(s: &str) -> Result<Vec<usize>, CpuListError> {
    let mut cpus = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let parse = |x: &str| {
            x.trim()
                .parse::<usize>()
                .map_err(|_| CpuListError::NotANumber {
                    part: x.to_string(),
                    list: s.to_string(),
                })
        };
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (parse(a)?, parse(b)?);
                if a > b {
                    return Err(CpuListError::Backwards {
                        part: part.to_string(),
                        list: s.to_string(),
                    });
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(parse(part)?),
        }
    }
    if cpus.is_empty() {
        return Err(CpuListError::Empty(s.to_string()));
    }
    Ok(cpus)
}

/// Seconds on a CPU-time clock (0 if it cannot be read).
fn clock_seconds(clock: libc::clockid_t) -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a clock id and a valid out-pointer; an invalid id only makes the call fail.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return 0.0;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// CPU seconds the calling thread has used.
pub fn thread_cpu_seconds() -> f64 {
    clock_seconds(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// CPU seconds the whole process has used: every thread, those that have exited included, and
/// the kernel's io_uring workers (`iou-wrk-*`), which are threads of the process but run no
/// code of ours, so no thread clock of ours sees them.
pub fn process_cpu_seconds() -> f64 {
    clock_seconds(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// The CPU-time clock of another running thread, so that its CPU use can be read from outside
/// (how much the link emulation cost while a window recorded).
#[derive(Clone, Copy, Debug)]
pub struct ThreadCpuClock(libc::clockid_t);

impl ThreadCpuClock {
    /// The clock of the thread behind `handle` (None if the kernel refuses it).
    pub fn of<T>(handle: &std::thread::JoinHandle<T>) -> Option<ThreadCpuClock> {
        use std::os::unix::thread::JoinHandleExt;
        let mut clock: libc::clockid_t = 0;
        // SAFETY: the thread is alive while its handle is held, and the out-pointer is valid.
        let rc = unsafe { libc::pthread_getcpuclockid(handle.as_pthread_t(), &mut clock) };
        (rc == 0).then_some(ThreadCpuClock(clock))
    }

    /// CPU seconds the thread has used (0 once it has exited).
    pub fn seconds(self) -> f64 {
        clock_seconds(self.0)
    }
}

/// The CPUs this process may run on, in order.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity fills it for pid 0 (this thread).
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return (0..num_cpus_fallback()).collect();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

fn num_cpus_fallback() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// Pins the calling thread to one CPU.
pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("CPU {cpu} is beyond CPU_SETSIZE"),
        ));
    }
    // SAFETY: as in allowed_cpus; CPU_SET is in bounds (checked above).
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Sets the calling thread's nice value (Linux: each thread has its own). Raising priority (a
/// negative value) needs root or CAP_SYS_NICE; lowering it needs nothing.
pub fn set_current_thread_nice(nice: i32) -> io::Result<()> {
    // SAFETY: plain syscalls; gettid names the calling thread, which setpriority then changes.
    unsafe {
        let tid = libc::gettid();
        if libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Puts the calling thread's disk I/O in the idle class (`ioprio_set`, IOPRIO_CLASS_IDLE): the
/// block layer serves it only when no other class waits (mq-deadline and BFQ honour it, with
/// aging so it is not starved for ever; `none` ignores it). For work that must yield the disk to
/// a recording, such as an export reading a sealed burst back. Needs no privilege.
pub fn set_current_thread_io_idle() -> io::Result<()> {
    const IOPRIO_WHO_PROCESS: libc::c_long = 1;
    const IOPRIO_CLASS_IDLE: libc::c_long = 3;
    const IOPRIO_CLASS_SHIFT: u32 = 13;
    // SAFETY: plain syscalls; gettid names the calling thread, which ioprio_set then changes.
    unsafe {
        let tid = libc::gettid() as libc::c_long;
        let prio = IOPRIO_CLASS_IDLE << IOPRIO_CLASS_SHIFT;
        if libc::syscall(libc::SYS_ioprio_set, IOPRIO_WHO_PROCESS, tid, prio) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The calling thread's I/O priority class (`ioprio_get`): 0 none, 1 real-time, 2 best-effort,
/// 3 idle.
pub fn current_thread_io_class() -> io::Result<u32> {
    // SAFETY: plain syscalls on the calling thread.
    let prio = unsafe {
        let tid = libc::gettid() as libc::c_long;
        libc::syscall(libc::SYS_ioprio_get, 1 as libc::c_long, tid)
    };
    if prio < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((prio >> 13) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_put_in_the_idle_io_class_is_there() {
        // Whatever class this test runs in (a caller under `ionice -c3` is idle already).
        let before = current_thread_io_class().unwrap();
        std::thread::spawn(|| {
            set_current_thread_io_idle().unwrap();
            assert_eq!(current_thread_io_class().unwrap(), 3);
        })
        .join()
        .unwrap();
        // Only that thread: this one keeps its class.
        assert_eq!(current_thread_io_class().unwrap(), before);
    }

    #[test]
    fn cpu_lists_parse_like_the_kernel_writes_them() {
        assert_eq!(parse_cpu_list("0-3,8").unwrap(), vec![0, 1, 2, 3, 8]);
        assert_eq!(parse_cpu_list("1").unwrap(), vec![1]);
        assert!(matches!(
            parse_cpu_list("3-1"),
            Err(CpuListError::Backwards { .. })
        ));
        assert!(parse_cpu_list("a").is_err());
        assert!(parse_cpu_list("").is_err());
    }

    #[test]
    fn thread_cpu_clocks_count_cpu_time() {
        let (spun, spun_rx) = std::sync::mpsc::channel();
        let (release, release_rx) = std::sync::mpsc::channel::<()>();
        let h = std::thread::spawn(move || {
            let t0 = thread_cpu_seconds();
            let mut x = 0u64;
            while thread_cpu_seconds() - t0 < 0.02 {
                x = std::hint::black_box(x.wrapping_add(1));
            }
            spun.send(()).unwrap();
            // Waiting costs no CPU: the clock read from outside stands still.
            let _ = release_rx.recv_timeout(std::time::Duration::from_secs(30));
            x
        });
        let clock = ThreadCpuClock::of(&h).expect("a running thread has a CPU clock");
        spun_rx
            .recv_timeout(std::time::Duration::from_secs(30))
            .unwrap();
        let used = clock.seconds();
        assert!(used >= 0.02, "{used}");
        release.send(()).unwrap();
        h.join().unwrap();
    }

    #[test]
    fn a_thread_can_lower_its_own_priority_alone() {
        std::thread::spawn(|| {
            set_current_thread_nice(5).unwrap();
            // SAFETY: reading the calling thread's nice value.
            let nice =
                unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) };
            assert_eq!(nice, 5);
        })
        .join()
        .unwrap();
        // SAFETY: as above, for this thread, which kept its own.
        let nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) };
        assert_ne!(nice, 5);
    }

    #[test]
    fn detection_is_consistent() {
        let f = CpuFeatures::detect();
        if cfg!(target_arch = "x86_64") {
            assert!(f.simd_path().is_some());
            assert!(f.best_flush().is_some());
        }
        assert!(!allowed_cpus().is_empty());
        pin_current_thread(allowed_cpus()[0]).unwrap();
    }
}
