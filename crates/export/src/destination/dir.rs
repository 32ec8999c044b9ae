//! `file:///DIR`: a directory as the store (an embedded unit's, or a mounted file system). An
//! object is a file at its key; a multipart upload is `KEY.partial`, each part written at its
//! offset and flushed, renamed into place (the directory flushed) once complete. Written here
//! rather than on a library's local store, which flushes neither.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::{ExportStore, Part, S3Settings, StoreError};

pub struct DirStore {
    root: PathBuf,
}

pub(super) fn open(rest: &str, _: &S3Settings) -> Result<(Box<dyn ExportStore>, String), String> {
    let root = PathBuf::from(rest);
    if !root.is_absolute() {
        return Err("file:// needs an absolute directory (file:///data/export)".into());
    }
    Ok((Box::new(DirStore { root }), String::new()))
}

fn failed<'a>(what: &str, path: &'a Path) -> impl Fn(std::io::Error) -> StoreError + 'a {
    let what = what.to_string();
    move |e| StoreError::Failed(format!("{}: {what}: {e}", path.display()))
}

impl DirStore {
    /// The store in directory `root` (absolute, as `file://` takes it).
    pub fn new(root: &Path) -> DirStore {
        DirStore {
            root: root.to_path_buf(),
        }
    }

    fn partial(&self, key: &str) -> PathBuf {
        self.root.join(format!("{key}.partial"))
    }

    /// Renames the complete `KEY.partial` into place and flushes its directory, so that the
    /// object outlives a power cut once this returns.
    fn finish(&self, key: &str) -> Result<(), StoreError> {
        let (from, to) = (self.partial(key), self.root.join(key));
        std::fs::rename(&from, &to).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => StoreError::NotFound,
            _ => failed("rename into place", &from)(e),
        })?;
        let parent = to.parent().expect("a key has a directory");
        std::fs::File::open(parent)
            .and_then(|d| d.sync_all())
            .map_err(failed("flush the directory", parent))
    }
}

impl ExportStore for DirStore {
    fn describe(&self) -> String {
        format!("file://{}", self.root.display())
    }

    /// A page: smaller parts would only make the journal (a line per part) outgrow the data.
    fn min_part_bytes(&self) -> u64 {
        4096
    }

    fn probe(&self) -> Result<(), StoreError> {
        if self.root.is_dir() {
            Ok(())
        } else {
            Err(StoreError::Failed(format!(
                "{}: not a directory",
                self.root.display()
            )))
        }
    }

    fn put(&self, key: &str, data: Vec<u8>) -> Result<(), StoreError> {
        self.begin_upload(key)?;
        let path = self.partial(key);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .map_err(failed("open", &path))?;
        f.write_all(&data).map_err(failed("write", &path))?;
        f.sync_data().map_err(failed("flush", &path))?;
        self.finish(key)
    }

    fn begin_upload(&self, key: &str) -> Result<String, StoreError> {
        let path = self.partial(key);
        let parent = path.parent().expect("a key has a directory");
        std::fs::create_dir_all(parent).map_err(failed("create", parent))?;
        std::fs::File::create(&path).map_err(failed("create", &path))?;
        Ok(format!("{key}.partial"))
    }

    fn put_part(&self, key: &str, _upload: &str, part: Part) -> Result<String, StoreError> {
        let path = self.partial(key);
        // Not created here: an upload whose file is gone is an upload the store lost.
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => StoreError::NotFound,
                _ => failed("open", &path)(e),
            })?;
        f.seek(SeekFrom::Start(part.offset_bytes))
            .map_err(failed("seek", &path))?;
        f.write_all(&part.data).map_err(failed("write", &path))?;
        f.sync_data().map_err(failed("flush", &path))?;
        Ok(format!("{:08x}", crc32c::crc32c(&part.data)))
    }

    fn complete_upload(&self, key: &str, _upload: &str, _: Vec<String>) -> Result<(), StoreError> {
        self.finish(key)
    }

    fn abort_upload(&self, key: &str, _upload: &str) -> Result<(), StoreError> {
        let path = self.partial(key);
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(failed("remove", &path)(e)),
            _ => Ok(()),
        }
    }

    fn size(&self, key: &str) -> Result<Option<u64>, StoreError> {
        let path = self.root.join(key);
        match std::fs::metadata(&path) {
            Ok(m) => Ok(Some(m.len())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(failed("stat", &path)(e)),
        }
    }

    fn read(
        &self,
        key: &str,
        offset: u64,
        len: u64,
        each: &mut dyn FnMut(&[u8]),
    ) -> Result<(), StoreError> {
        let path = self.root.join(key);
        let mut f = std::fs::File::open(&path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => StoreError::NotFound,
            _ => failed("open", &path)(e),
        })?;
        f.seek(SeekFrom::Start(offset))
            .map_err(failed("seek", &path))?;
        let mut f = f.take(len);
        let mut buf = vec![0u8; len.min(1 << 20) as usize];
        loop {
            match f.read(&mut buf) {
                Ok(0) => return Ok(()),
                Ok(n) => each(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(failed("read", &path)(e)),
            }
        }
    }
}
