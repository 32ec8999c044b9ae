//! The table of persistence methods and what each can do.
//!
//! Like fio's engine table, callers ask a method for its capabilities instead of testing its
//! name: the benchmark lays out blocks by `needs_io_alignment`, the recorder picks a default by
//! `mapped` and `bypasses_page_cache`, and adding a method is adding a row and a backend file.

use std::fmt;
use std::str::FromStr;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Method {
    /// Mapped file, non-temporal stores (AVX-512/AVX2/SSE2 chosen at run time), SFENCE.
    Nt,
    /// Mapped file, regular stores, CLWB per cache line, SFENCE.
    Clwb,
    /// Mapped file, regular stores, CLFLUSHOPT per cache line, SFENCE.
    Clflushopt,
    /// Mapped file, regular stores, CLFLUSH per cache line (no fence needed).
    Clflush,
    /// Mapped file, memcpy, msync: the honest path on a mapping that is not DAX.
    Msync,
    /// O_DIRECT pwrite from aligned buffers, fdatasync or O_DSYNC.
    Direct,
    /// io_uring with O_DIRECT, registered buffers and file, queue depth > 1, ordered fsync.
    Uring,
    /// write + fdatasync through the page cache: the baseline.
    Buffered,
    /// libpmem's pmem_memcpy_nodrain + pmem_drain through FFI (cargo feature `pmdk`).
    Pmdk,
}

/// What a method does, independent of the medium it runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capabilities {
    /// Stores go through a shared memory mapping of the target file.
    pub mapped: bool,
    /// Data does not pass through the page cache (O_DIRECT; on DAX the mapped methods too).
    pub bypasses_page_cache: bool,
    /// More than one write can be in flight from one thread.
    pub async_queue: bool,
    /// Offsets must be multiples of the medium's direct-I/O alignment; lengths are padded to it.
    pub needs_io_alignment: bool,
    /// The cargo feature the method needs to be compiled in, if any.
    pub cargo_feature: Option<&'static str>,
}

pub struct MethodInfo {
    pub method: Method,
    pub name: &'static str,
    pub summary: &'static str,
    pub capabilities: Capabilities,
}

const MAPPED: Capabilities = Capabilities {
    mapped: true,
    bypasses_page_cache: false,
    async_queue: false,
    needs_io_alignment: false,
    cargo_feature: None,
};

const DIRECT: Capabilities = Capabilities {
    mapped: false,
    bypasses_page_cache: true,
    async_queue: false,
    needs_io_alignment: true,
    cargo_feature: None,
};

pub const METHODS: [MethodInfo; 9] = [
    MethodInfo {
        method: Method::Nt,
        name: "nt",
        summary: "mapped file, non-temporal stores (widest SIMD the CPU has), SFENCE",
        capabilities: MAPPED,
    },
    MethodInfo {
        method: Method::Clwb,
        name: "clwb",
        summary: "mapped file, stores, CLWB per cache line, SFENCE",
        capabilities: MAPPED,
    },
    MethodInfo {
        method: Method::Clflushopt,
        name: "clflushopt",
        summary: "mapped file, stores, CLFLUSHOPT per cache line, SFENCE",
        capabilities: MAPPED,
    },
    MethodInfo {
        method: Method::Clflush,
        name: "clflush",
        summary: "mapped file, stores, CLFLUSH per cache line (strongly ordered, no fence)",
        capabilities: MAPPED,
    },
    MethodInfo {
        method: Method::Msync,
        name: "msync",
        summary: "mapped file, memcpy, msync of the written range",
        capabilities: MAPPED,
    },
    MethodInfo {
        method: Method::Direct,
        name: "direct",
        summary: "O_DIRECT pwrite from aligned buffers, fdatasync or O_DSYNC",
        capabilities: DIRECT,
    },
    MethodInfo {
        method: Method::Uring,
        name: "uring",
        summary: "io_uring O_DIRECT writes, registered buffers and file, fsync after completions",
        capabilities: Capabilities {
            async_queue: true,
            ..DIRECT
        },
    },
    MethodInfo {
        method: Method::Buffered,
        name: "buffered",
        summary: "write + fdatasync through the page cache (baseline)",
        capabilities: Capabilities {
            mapped: false,
            bypasses_page_cache: false,
            async_queue: false,
            needs_io_alignment: false,
            cargo_feature: None,
        },
    },
    MethodInfo {
        method: Method::Pmdk,
        name: "pmdk",
        summary: "mapped file, libpmem pmem_memcpy_nodrain + pmem_drain (feature `pmdk`)",
        capabilities: Capabilities {
            cargo_feature: Some("pmdk"),
            ..MAPPED
        },
    },
];

impl Method {
    pub fn info(self) -> &'static MethodInfo {
        METHODS
            .iter()
            .find(|m| m.method == self)
            .expect("every Method has a row in METHODS")
    }

    pub fn name(self) -> &'static str {
        self.info().name
    }

    pub fn capabilities(self) -> Capabilities {
        let c = self.info().capabilities;
        debug_assert!(
            !(c.mapped && c.needs_io_alignment),
            "a mapped method stores bytes where they go: it needs no I/O alignment"
        );
        debug_assert!(
            !c.needs_io_alignment || c.bypasses_page_cache,
            "only the O_DIRECT methods need I/O alignment"
        );
        c
    }

    /// Whether this build of snbuf contains the method.
    pub fn compiled_in(self) -> bool {
        self != Method::Pmdk || cfg!(feature = "pmdk")
    }

    pub fn all() -> impl Iterator<Item = Method> {
        METHODS.iter().map(|m| m.method)
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, thiserror::Error)]
#[error("unknown method '{0}' (known: nt, clwb, clflushopt, clflush, msync, direct, uring, buffered, pmdk)")]
pub struct UnknownMethod(pub String);

impl FromStr for Method {
    type Err = UnknownMethod;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        METHODS
            .iter()
            .find(|m| m.name.eq_ignore_ascii_case(s.trim()))
            .map(|m| m.method)
            .ok_or_else(|| UnknownMethod(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_method_round_trips_through_its_name() {
        for m in Method::all() {
            assert_eq!(m.name().parse::<Method>().unwrap(), m);
        }
        assert!("nope".parse::<Method>().is_err());
    }

    #[test]
    fn only_block_methods_need_alignment() {
        for m in Method::all() {
            assert_eq!(
                m.capabilities().needs_io_alignment,
                matches!(m, Method::Direct | Method::Uring)
            );
        }
    }
}
