//! Where a burst's page goes: `--out`, or `show-<burst>` in the working directory; never inside
//! the burst (snbuf adds nothing to a burst's directory) and never over a directory of other
//! files (a page's own directory, which holds `show.json`, is rewritten in place).

use std::path::{Component, Path, PathBuf};

/// Why a page cannot go where it was asked to.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PageDirError {
    #[error("--out {}: inside the burst; snbuf adds nothing to a burst's directory", .0.display())]
    InsideBurst(PathBuf),
    #[error("--out {}: a directory with other files in it (a page's directory holds show.json); give a new or empty one", .0.display())]
    OtherFiles(PathBuf),
}

/// The directory the page of the burst at `burst_dir` goes to: `out`, or `show-<burst>`.
pub fn page_dir(burst_dir: &Path, out: Option<&Path>) -> Result<PathBuf, PageDirError> {
    let id = burst_dir
        .file_name()
        .map_or("burst".into(), |n| n.to_string_lossy().into_owned());
    let out_dir = out.map_or_else(|| PathBuf::from(format!("show-{id}")), Path::to_path_buf);
    if resolved(&out_dir)
        .zip(resolved(burst_dir))
        .is_some_and(|(o, d)| o.starts_with(d))
    {
        return Err(PageDirError::InsideBurst(out_dir));
    }
    let foreign = std::fs::read_dir(&out_dir).is_ok_and(|mut e| e.next().is_some())
        && !out_dir.join("show.json").is_file();
    if foreign {
        return Err(PageDirError::OtherFiles(out_dir));
    }
    Ok(out_dir)
}

/// Where `path` is, or would be once made: its longest existing ancestor as it is on disk
/// (symbolic links and `..` resolved), then the rest of it, which cannot hold a link, with its
/// `..` taken lexically. None where the working directory cannot be read.
fn resolved(path: &Path) -> Option<PathBuf> {
    let absolute = std::path::absolute(path).ok()?;
    let parts: Vec<Component> = absolute.components().collect();
    (1..=parts.len()).rev().find_map(|existing| {
        let mut at = parts[..existing]
            .iter()
            .collect::<PathBuf>()
            .canonicalize()
            .ok()?;
        for part in &parts[existing..] {
            match part {
                Component::ParentDir => {
                    at.pop();
                }
                Component::Normal(name) => at.push(name),
                Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
            }
        }
        Some(at)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_goes_beside_the_burst_never_into_it_nor_over_other_files() {
        let tmp = tempfile::tempdir().unwrap();
        let burst = tmp.path().join("b1");
        std::fs::create_dir(&burst).unwrap();
        let inside = burst.join("page");
        assert_eq!(
            page_dir(&burst, Some(&inside)),
            Err(PageDirError::InsideBurst(inside))
        );
        assert_eq!(
            page_dir(&burst, Some(&burst)),
            Err(PageDirError::InsideBurst(burst.clone()))
        );
        // Nor by a way round that does not exist yet: `..` after a new directory, a link.
        let round = tmp.path().join("new/../b1/x/y");
        assert_eq!(
            page_dir(&burst, Some(&round)),
            Err(PageDirError::InsideBurst(round.clone()))
        );
        let link = tmp.path().join("lnk");
        std::os::unix::fs::symlink(&burst, &link).unwrap();
        let through = link.join("page");
        assert_eq!(
            page_dir(&burst, Some(&through)),
            Err(PageDirError::InsideBurst(through.clone()))
        );
        let other = tmp.path().join("other");
        std::fs::create_dir(&other).unwrap();
        std::fs::write(other.join("notes.txt"), "mine").unwrap();
        assert_eq!(
            page_dir(&burst, Some(&other)),
            Err(PageDirError::OtherFiles(other.clone()))
        );
        // A page's own directory is rewritten; an empty or new one is taken.
        std::fs::write(other.join("show.json"), "{}").unwrap();
        assert_eq!(page_dir(&burst, Some(&other)), Ok(other));
        let new = tmp.path().join("new");
        assert_eq!(page_dir(&burst, Some(&new)), Ok(new));
        assert_eq!(page_dir(&burst, None), Ok(PathBuf::from("show-b1")));
    }
}
