//! The journal's tests: outcomes across reopens, orphans, rewrites, torn lines, the join time.
use super::*;

#[test]
fn outcomes_survive_a_reopen_and_an_orphan_becomes_missed() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("t-rec")).unwrap();
    {
        let mut j = TriggerJournal::open(dir.path()).unwrap();
        j.record(
            "t-rec",
            Outcome::Recording,
            None,
            0.1,
            (Route::JetStream, Some(7)),
            None,
        )
        .unwrap();
        j.record(
            "t-gone",
            Outcome::Recording,
            None,
            0.0,
            (Route::Fast, None),
            None,
        )
        .unwrap();
        j.record(
            "t-miss",
            Outcome::Missed,
            Some("late".into()),
            30.0,
            (Route::JetStream, Some(9)),
            None,
        )
        .unwrap();
        j.record(
            "t-told",
            Outcome::Missed,
            Some("late".into()),
            9.0,
            (Route::JetStream, Some(8)),
            None,
        )
        .unwrap();
        j.mark_published("t-told").unwrap();
        // Joined burst t-rec: kept while that burst exists. Joined one that never began: missed.
        j.record(
            "t-join",
            Outcome::Recording,
            None,
            0.0,
            (Route::Fast, None),
            Some("t-rec"),
        )
        .unwrap();
        j.record(
            "t-join-gone",
            Outcome::Recording,
            None,
            0.0,
            (Route::Fast, None),
            Some("t-x"),
        )
        .unwrap();
    }
    let j = TriggerJournal::open(dir.path()).unwrap();
    assert_eq!(j.last_stream_seq(), Some(9));
    assert_eq!(j.get("t-rec").unwrap().outcome, Outcome::Recording);
    // How each copy came survives the reopen: the fleet trials measure deafness by it.
    assert_eq!(j.get("t-rec").unwrap().route, Some(Route::JetStream));
    assert_eq!(j.get("t-join").unwrap().route, Some(Route::Fast));
    assert!(j.get("t-told").unwrap().published);
    let gone = j.get("t-gone").unwrap();
    assert_eq!(gone.outcome, Outcome::Missed, "no burst directory: missed");
    assert!(gone
        .reason
        .as_deref()
        .unwrap()
        .contains("before its burst began"));
    assert_eq!(j.get("t-join").unwrap().outcome, Outcome::Recording);
    assert_eq!(j.get("t-join").unwrap().burst_id.as_deref(), Some("t-rec"));
    let owed: Vec<String> = j.owed().into_iter().map(|(id, _)| id).collect();
    assert_eq!(owed, ["t-gone", "t-join-gone", "t-miss"]);
    assert!(j.get("t-never").is_none());
}

/// A journal line as an older unit, or `days` ago, wrote it.
fn old_line(id: &str, outcome: &str, days: u64, now: u64) -> String {
    let at = now - days * 86_400 * 1_000_000_000;
    format!(r#"{{"trigger_id":"{id}","outcome":"{outcome}","delay_s":0.5,"at_unix_ns":{at}}}"#)
}

#[test]
fn a_rewrite_keeps_what_jetstream_could_still_deliver_and_every_report_owed() {
    let dir = tempfile::tempdir().unwrap();
    let now = snbuf_quantity::now_unix_ns();
    std::fs::create_dir(dir.path().join("new-rec")).unwrap();
    let text = [
        old_line("old-rec", "recording", 5, now),
        old_line("old-miss", "missed", 5, now),
        r#"{"trigger_id":"old-miss","published":true}"#.to_string(),
        old_line("old-owed", "missed", 5, now),
        old_line("new-rec", "recording", 1, now),
        r#"{"trigger_id":"pre","outcome":"missed","delay_s":1.0,"stream_seq":41}"#.into(),
        r#"{"trigger_id":"pre","published":true}"#.into(),
    ]
    .join("\n")
        + "\n";
    let path = dir.path().join(FILE_NAME);
    std::fs::write(&path, text).unwrap();
    // old-rec's burst directory is gone: at open it is taken for an orphan, a missed
    // trigger whose report is owed (so kept by the rewrite).
    let mut j = TriggerJournal::open(dir.path()).unwrap();
    assert_eq!(
        j.missed(),
        3 + 1,
        "old-miss, old-owed, pre, and old-rec as an orphan"
    );
    j.compact(now).unwrap();
    // Kept: the recent one, and every report not yet stored; dropped: what JetStream no
    // longer holds, its missed ones still counted.
    assert!(j.get("new-rec").is_some());
    assert!(j.get("old-owed").is_some_and(|h| !h.published));
    assert!(j.get("old-miss").is_none() && j.get("pre").is_none());
    assert_eq!(j.missed(), 4);
    assert_eq!(j.last_stream_seq(), Some(41));
    j.record(
        "after",
        Outcome::Missed,
        None,
        0.0,
        (Route::JetStream, Some(50)),
        None,
    )
    .unwrap();
    drop(j);
    let j = TriggerJournal::open(dir.path()).unwrap();
    assert_eq!(j.missed(), 5, "the count survives the rewrite and a reopen");
    assert_eq!(j.last_stream_seq(), Some(50));
    assert!(j.get("new-rec").is_some() && j.get("after").is_some());
    let lines = std::fs::read_to_string(&path).unwrap().lines().count();
    assert!(lines <= 6, "{lines} lines");
}

#[test]
fn the_line_that_makes_a_rewrite_due_is_in_the_rewritten_journal() {
    let dir = tempfile::tempdir().unwrap();
    let mut j = TriggerJournal::open(dir.path()).unwrap();
    j.record(
        "a",
        Outcome::Missed,
        None,
        0.0,
        (Route::JetStream, Some(3)),
        None,
    )
    .unwrap();
    j.compact_at = j.lines + 1;
    j.record(
        "b",
        Outcome::Missed,
        None,
        0.0,
        (Route::JetStream, Some(4)),
        None,
    )
    .unwrap();
    assert!(j.lines < 4, "rewritten: {} lines", j.lines);
    drop(j);
    let j = TriggerJournal::open(dir.path()).unwrap();
    assert!(j.get("a").is_some() && j.get("b").is_some());
    assert_eq!(j.last_stream_seq(), Some(4));
    assert_eq!(j.owed().len(), 2);
}

#[test]
fn a_journal_past_its_size_is_rewritten_when_opened() {
    let dir = tempfile::tempdir().unwrap();
    let now = snbuf_quantity::now_unix_ns();
    let text: String = (0..COMPACT_AT_LINES)
        .map(|k| old_line(&format!("t{k}"), "missed", 3, now) + "\n")
        .collect();
    let path = dir.path().join(FILE_NAME);
    std::fs::write(&path, text).unwrap();
    let j = TriggerJournal::open(dir.path()).unwrap();
    assert_eq!(j.missed(), COMPACT_AT_LINES as u64);
    // Every one was owed (never published): all kept. Once stored, they go.
    drop(j);
    let mut j = TriggerJournal::open(dir.path()).unwrap();
    for k in 0..COMPACT_AT_LINES {
        j.mark_published(&format!("t{k}")).unwrap();
    }
    drop(j);
    let j = TriggerJournal::open(dir.path()).unwrap();
    assert_eq!(j.missed(), COMPACT_AT_LINES as u64);
    let lines = std::fs::read_to_string(&path).unwrap().lines().count();
    assert!(lines < 10, "{lines} lines: the journal does not only grow");
}

#[test]
fn the_join_time_is_kept_from_the_first_open_through_reopens_and_rewrites() {
    let dir = tempfile::tempdir().unwrap();
    let before = snbuf_quantity::now_unix_ns();
    let joined = TriggerJournal::open(dir.path())
        .unwrap()
        .joined_unix_ns()
        .expect("a new journal knows when the unit joined");
    assert!(joined >= before);
    let mut j = TriggerJournal::open(dir.path()).unwrap();
    assert_eq!(
        j.joined_unix_ns(),
        Some(joined),
        "not taken anew at a restart"
    );
    assert_eq!(j.missed(), 0, "the header is no trigger");
    j.compact(snbuf_quantity::now_unix_ns()).unwrap();
    drop(j);
    let j = TriggerJournal::open(dir.path()).unwrap();
    assert_eq!(j.joined_unix_ns(), Some(joined), "carried by a rewrite");

    // A journal an older snbuf began has no such line: its oldest trigger stands in.
    let old = tempfile::tempdir().unwrap();
    let text = [
        old_line("a", "missed", 3, before),
        old_line("b", "missed", 1, before),
    ];
    std::fs::write(old.path().join(FILE_NAME), text.join("\n") + "\n").unwrap();
    let j = TriggerJournal::open(old.path()).unwrap();
    assert_eq!(j.joined_unix_ns(), j.get("a").map(|h| h.at_unix_ns));

    // Its first line torn by a crash, or an older journal holding no trigger: it joins now.
    for text in [
        r#"{"trigger_id":"","delay_s":0.0,"carr"#,
        r#"{"carried_missed":2}"#,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        std::fs::write(
            &path,
            text.to_string() + if text.ends_with('}') { "\n" } else { "" },
        )
        .unwrap();
        let before = snbuf_quantity::now_unix_ns();
        let j = TriggerJournal::open(dir.path()).unwrap();
        assert!(j.joined_unix_ns().is_some_and(|t| t >= before), "{text}");
        drop(j);
        let again = TriggerJournal::open(dir.path()).unwrap().joined_unix_ns();
        assert!(again.is_some_and(|t| t >= before), "{text}: kept");
    }
}

#[test]
fn a_torn_last_line_is_ignored_and_a_bad_one_elsewhere_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(FILE_NAME);
    let good = r#"{"trigger_id":"a","outcome":"missed","reason":"x","delay_s":1.0}"#;
    std::fs::write(&path, format!("{good}\n{{\"trigger_id\":\"b\",\"out")).unwrap();
    let mut j = TriggerJournal::open(dir.path()).unwrap();
    assert!(j.get("a").is_some() && j.get("b").is_none());
    j.mark_published("a").unwrap();
    drop(j);
    let j = TriggerJournal::open(dir.path()).unwrap();
    assert!(
        j.get("a").unwrap().published,
        "appended after the torn line"
    );

    std::fs::write(&path, format!("garbage\n{good}\n")).unwrap();
    let e = TriggerJournal::open(dir.path()).err().unwrap();
    assert!(e.contains("line 1"), "{e}");
}
