//! snbuf-persist: how bytes become durable on a medium.
//!
//! One `Sink` per persistence method (see `method::METHODS` for the table and its capability
//! flags): mapped memory with non-temporal stores or cache-line flushes, msync, O_DIRECT,
//! io_uring, buffered writes, and libpmem behind the `pmdk` feature. The recorder and every
//! benchmark go through `open`, so a benchmark figure is a promise about the recorder.
//!
//! The contract (docs/DURABILITY.md): data passed to `Sink::write_at` is durable, as far as the
//! medium can make it, once the next `Sink::persist` returns Ok — and not before. After an I/O
//! error a sink is latched failed and never reports success again.

pub mod backends;
pub mod error;
pub mod fault;
pub mod latch;
pub mod medium;
pub mod method;
pub mod nt_crc;
pub mod replace;
/// A simulated medium that crashes, for the crash tests of the layers above: test support only.
#[cfg(any(test, feature = "testing"))]
pub mod sim;
pub mod sink;

pub use error::{PersistError, Result};
pub use latch::Latched;
pub use medium::Medium;
// The machine's own pieces live in snbuf-platform; these are part of a sink's configuration.
pub use method::{Capabilities, Method, METHODS};
pub use sink::{Durability, Sink, SinkConfig, SinkReport, SyncMode};
pub use snbuf_platform::{AlignedBuf, PageSize, PagesObtained};

/// Something to run with a sink of its concrete type.
///
/// `open_with` hands the visitor the latched backend itself, not a trait object, so a hot loop
/// written against `S: Sink` is compiled once per backend with every call inlined: at 256 B a
/// persist to memory takes ~200 ns and one virtual call per operation costs ~2% of it. Code that
/// does not care uses `open`, which boxes.
pub trait WithSink {
    type Output;
    fn run<S: Sink + 'static>(self, sink: S) -> Self::Output;
}

/// Opens a sink for `config.method` (its first I/O error latched) and runs `visitor` with it.
pub fn open_with<W: WithSink>(config: &SinkConfig, visitor: W) -> Result<W::Output> {
    if !config.method.compiled_in() {
        return Err(PersistError::Unsupported {
            method: config.method,
            why: format!(
                "this snbuf was built without it; rebuild with `--features {}` (needs libpmem-dev)",
                config.method.capabilities().cargo_feature.unwrap_or("?")
            ),
        });
    }
    if config.region_bytes == 0 {
        return Err(PersistError::Config("region of 0 bytes".into()));
    }
    if config.max_io_bytes == 0 {
        return Err(PersistError::Config("largest I/O of 0 bytes".into()));
    }
    if !config
        .region_offset_bytes
        .is_multiple_of(config.page_size.bytes() as u64)
    {
        return Err(PersistError::Config(format!(
            "region offset {} is not a multiple of the {} B page size",
            config.region_offset_bytes,
            config.page_size.bytes()
        )));
    }
    use backends::{
        buffered::BufferedSink, direct::DirectSink, mapped::MappedSink, uring::UringSink,
    };
    Ok(match config.method {
        Method::Nt
        | Method::Clwb
        | Method::Clflushopt
        | Method::Clflush
        | Method::Msync
        | Method::Pmdk => visitor.run(Latched::new(MappedSink::open(config)?)),
        Method::Direct => visitor.run(Latched::new(DirectSink::open(config)?)),
        Method::Uring => visitor.run(Latched::new(UringSink::open(config)?)),
        Method::Buffered => visitor.run(Latched::new(BufferedSink::open(config)?)),
    })
}

/// Opens a sink for `config.method`, wrapped so that its first I/O error is latched.
pub fn open(config: &SinkConfig) -> Result<Box<dyn Sink>> {
    struct Boxed;
    impl WithSink for Boxed {
        type Output = Box<dyn Sink>;
        fn run<S: Sink + 'static>(self, sink: S) -> Box<dyn Sink> {
            Box::new(sink)
        }
    }
    open_with(config, Boxed)
}
