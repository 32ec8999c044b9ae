//! Burst names in an output directory: which burst answers a trigger, and the name a new
//! burst takes when its trigger's id already names something else there (the unit's socket,
//! the fleet's journal, another trigger's burst). A trigger is never lost to a name it could not
//! know was taken, and never recorded twice for one it could.

use std::path::Path;

use crate::manifest::Manifest;
use crate::spec::MAX_BURST_ID_BYTES;

/// The burst in `output` that answers trigger `id` (its manifest says so), if one does: the
/// burst named `id`, or one named apart because `id` named something else (`ID-N`, found by
/// name among the output's entries, whatever numbers are missing). How a trigger delivered
/// again is told from one whose id merely names something else in the output.
pub fn burst_answering(output: &Path, id: &str) -> Option<String> {
    let answers = |name: &str| {
        let dir = output.join(name);
        dir.is_dir() && Manifest::read(&dir).is_ok_and(|m| m.answers(id))
    };
    if answers(id) {
        return Some(id.to_string());
    }
    let stem = apart_stem(id);
    let apart = |name: &str| {
        name.strip_prefix(stem.as_str())
            .and_then(|rest| rest.strip_prefix('-'))
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    };
    let mut names: Vec<String> = std::fs::read_dir(output)
        .ok()?
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|name| apart(name))
        .collect();
    names.sort();
    names.into_iter().find(|name| answers(name))
}

/// The name a burst opened by trigger `id` takes in `output`: `id` itself, or, when that already
/// names something (the unit's socket or journal, another trigger's burst), the first of `ID-2`,
/// `ID-3`, ... that names nothing. None when all are taken.
pub fn free_burst_name(output: &Path, id: &str) -> Option<String> {
    if !output.join(id).exists() {
        return Some(id.to_string());
    }
    let stem = apart_stem(id);
    (2..10_000)
        .map(|n| format!("{stem}-{n}"))
        .find(|name| !output.join(name).exists())
}

/// The name of the `n`th burst (n >= 2) of a chain that began with burst `root` (`--max-burst`):
/// the first of `ROOT-n`, `ROOT-(n+1)`, ... that names nothing in `output`. None when all are
/// taken.
pub fn free_name_after(output: &Path, root: &str, n: u32) -> Option<String> {
    assert!(n >= 2, "the root is the chain's first burst");
    let stem = apart_stem(root);
    (n..10_000)
        .map(|k| format!("{stem}-{k}"))
        .find(|name| !output.join(name).exists())
}

/// The part of trigger id `id` a burst named apart starts with (`STEM-N`): short enough that
/// the suffix keeps the name within an id's length.
fn apart_stem(id: &str) -> String {
    id.chars().take(MAX_BURST_ID_BYTES - 8).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_taken_by_anything_else_is_skipped() {
        let out = tempfile::tempdir().unwrap();
        assert_eq!(free_burst_name(out.path(), "x").as_deref(), Some("x"));
        std::fs::write(out.path().join("x"), b"a socket, say").unwrap();
        std::fs::create_dir(out.path().join("x-2")).unwrap();
        assert_eq!(free_burst_name(out.path(), "x").as_deref(), Some("x-3"));
        // Neither is a burst that answers trigger x.
        assert_eq!(burst_answering(out.path(), "x"), None);
    }

    /// A chain's next burst is never named as its root, even once the root was deleted (an
    /// exported copy of that name would be overwritten), nor as an earlier link of it.
    #[test]
    fn a_chains_next_name_follows_its_place() {
        let out = tempfile::tempdir().unwrap();
        assert_eq!(free_name_after(out.path(), "r", 2).as_deref(), Some("r-2"));
        assert_eq!(free_name_after(out.path(), "r", 3).as_deref(), Some("r-3"));
        std::fs::create_dir(out.path().join("r-3")).unwrap();
        assert_eq!(free_name_after(out.path(), "r", 3).as_deref(), Some("r-4"));
    }
}
