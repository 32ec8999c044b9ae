//! write + fdatasync through the page cache: the baseline every other method is measured against.

use std::fs::File;
use std::os::unix::fs::FileExt;

use crate::backends::{check_range, open_target, sync_as_asked, write_error};
use crate::error::{PersistError, Result};
use crate::medium;
use crate::sink::{Sink, SinkConfig, SinkReport, SyncMode};

pub struct BufferedSink {
    file: File,
    region_offset_bytes: u64,
    region_bytes: u64,
    sync_mode: SyncMode,
    report: SinkReport,
}

impl BufferedSink {
    pub fn open(config: &SinkConfig) -> Result<Self> {
        let flags = if config.sync_mode == SyncMode::Dsync {
            libc::O_DSYNC
        } else {
            0
        };
        let file = open_target(config, flags)?;
        let medium =
            medium::probe(&config.path).map_err(|e| PersistError::io("probe", &config.path, e))?;
        let durability = super::file_durability(medium.volatile, config.sync_mode);
        Ok(BufferedSink {
            file,
            region_offset_bytes: config.region_offset_bytes,
            region_bytes: config.region_bytes,
            sync_mode: config.sync_mode,
            report: SinkReport::of(config, medium, durability, 1, "pwrite"),
        })
    }
}

impl Sink for BufferedSink {
    fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        debug_assert_eq!(
            self.region_bytes, self.report.region_bytes,
            "the region checked is the one reported"
        );
        check_range(offset, data.len(), self.region_bytes)?;
        self.file
            .write_all_at(data, self.region_offset_bytes + offset)
            .map_err(|e| write_error("write", &self.report.path, e, data.len()))
    }

    fn persist(&mut self) -> Result<()> {
        sync_as_asked(&self.file, self.sync_mode, &self.report.path)
    }

    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<()> {
        debug_assert_eq!(
            self.region_bytes, self.report.region_bytes,
            "the region checked is the one reported"
        );
        check_range(offset, buf.len(), self.region_bytes)?;
        self.file
            .read_exact_at(buf, self.region_offset_bytes + offset)
            .map_err(|e| PersistError::io("read", &self.report.path, e))
    }

    fn report(&self) -> &SinkReport {
        &self.report
    }

    fn grow(&mut self, to: u64) -> Result<()> {
        self.region_bytes =
            super::grow_reported(&self.file, self.region_offset_bytes, &mut self.report, to)?;
        Ok(())
    }
}
