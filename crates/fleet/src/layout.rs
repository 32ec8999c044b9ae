//! The fleet's JetStream streams (triggers, events, status) and their settings. Whoever connects
//! first creates them, replicated as the cluster allows; a client that finds one with other
//! settings says so and uses it as it is (a fleet must not stop on a setting an operator chose),
//! and `snbuf fleet setup` changes an existing stream to the settings given.

use std::time::Duration;

use async_nats::jetstream::{self, stream::Config};

use crate::schema::*;

/// How long the trigger stream keeps a trigger (and may deliver it again to a unit that did not
/// acknowledge it): a trigger older than a day cannot reach any buffer.
pub const TRIGGER_MAX_AGE: Duration = Duration::from_secs(24 * 3600);

/// How long JetStream remembers a message id to drop a second publish of it: covers every
/// retry of `trigger --nats` and of a unit's events (each well under a minute).
pub const DUPLICATE_WINDOW: Duration = Duration::from_secs(10 * 60);

/// The three streams as the fleet wants them, each with `replicas` copies.
pub fn wanted(replicas: usize) -> [Config; 3] {
    let base = |name: &str, subject: &str| Config {
        name: name.into(),
        subjects: vec![subject.into()],
        num_replicas: replicas,
        duplicate_window: DUPLICATE_WINDOW,
        ..Default::default()
    };
    [
        Config {
            max_age: TRIGGER_MAX_AGE,
            ..base(TRIGGER_STREAM, TRIGGER_SUBJECT)
        },
        Config {
            // The record of what each unit sealed, failed or missed.
            max_age: Duration::from_secs(30 * 24 * 3600),
            ..base(EVENT_STREAM, EVENT_SUBJECTS)
        },
        Config {
            // Only each unit's latest heartbeat matters.
            max_messages_per_subject: 1,
            ..base(STATUS_STREAM, STATUS_SUBJECTS)
        },
    ]
}

/// Where `have` differs from `want` in a setting the fleet relies on, one phrase each.
pub fn differences(have: &Config, want: &Config) -> Vec<String> {
    let mut d = Vec::new();
    if have.num_replicas.max(1) != want.num_replicas.max(1) {
        d.push(format!(
            "{} replica(s), not {}",
            have.num_replicas.max(1),
            want.num_replicas
        ));
    }
    if have.subjects != want.subjects {
        d.push(format!(
            "subjects {:?}, not {:?}",
            have.subjects, want.subjects
        ));
    }
    if have.max_age != want.max_age {
        d.push(format!(
            "max age {} s, not {} s",
            have.max_age.as_secs(),
            want.max_age.as_secs()
        ));
    }
    // A server reports "no limit" as -1, a client asks for it as 0.
    if have.max_messages_per_subject.max(0) != want.max_messages_per_subject.max(0) {
        d.push(format!(
            "{} message(s) per subject, not {}",
            have.max_messages_per_subject, want.max_messages_per_subject
        ));
    }
    if have.duplicate_window < want.duplicate_window {
        d.push(format!(
            "a duplicate window of {} s, not {} s (a retried publish may be stored twice)",
            have.duplicate_window.as_secs(),
            want.duplicate_window.as_secs()
        ));
    }
    d
}

/// The streams in place: each created with `replicas` copies if missing, else used as it is.
/// Returns the trigger stream, and one line per stream whose settings differ from the fleet's.
pub async fn ensure(
    js: &jetstream::Context,
    replicas: usize,
) -> Result<(jetstream::stream::Stream, Vec<String>), String> {
    let mut warnings = Vec::new();
    let mut triggers = None;
    for want in wanted(replicas) {
        let name = want.name.clone();
        let stream = match js.get_stream(&name).await {
            Ok(s) => s,
            Err(e) if is_not_found(&e) => match js.create_stream(want.clone()).await {
                Ok(s) => s,
                // Another client may have created it meanwhile: use theirs.
                Err(create) => js.get_stream(&name).await.map_err(|_| {
                    format!(
                        "create stream {name} with {replicas} replica(s): {create} (where the servers grant permissions by role, the streams are the admin's to make: `snbuf fleet setup --nats-nkey admin.nk`)"
                    )
                })?,
            },
            Err(e) => return Err(format!("stream {name}: {e}")),
        };
        let have = &stream.cached_info().config;
        let d = differences(have, &want);
        if !d.is_empty() {
            warnings.push(format!(
                "stream {name} has {}: used as it is (`snbuf fleet setup` changes it)",
                d.join(", ")
            ));
        }
        if name == TRIGGER_STREAM {
            triggers = Some(stream);
        }
    }
    Ok((
        triggers.expect("the trigger stream is one of them"),
        warnings,
    ))
}

/// The stream does not exist (as opposed to: it did not answer).
pub fn is_not_found(e: &jetstream::context::GetStreamError) -> bool {
    use jetstream::context::GetStreamErrorKind;
    matches!(e.kind(), GetStreamErrorKind::JetStream(j)
        if j.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND)
}

/// `snbuf fleet setup`: every stream created, or changed to `replicas` copies and the fleet's
/// other settings. Returns one line per stream saying what was done.
pub async fn setup(js: &jetstream::Context, replicas: usize) -> Result<Vec<String>, String> {
    let mut done = Vec::new();
    for want in wanted(replicas) {
        let name = want.name.clone();
        match js.get_stream(&name).await {
            Ok(s) => {
                let mut d = differences(&s.cached_info().config, &want);
                let have = copies(s.cached_info());
                if d.is_empty() && have != replicas {
                    // Asked for before, never made (see below).
                    d.push(format!("{have} copy(ies), not {replicas}"));
                }
                if d.is_empty() {
                    done.push(format!("{name}: as wanted ({replicas} replica(s))"));
                    continue;
                }
                let now = js
                    .update_stream(want.clone())
                    .await
                    .map_err(|e| format!("update stream {name}: {e}"))?;
                // A server may accept a change it cannot honour (a single server takes 3
                // replicas into the config and keeps one copy): the copies that exist count.
                let copies = copies(&now);
                if copies != replicas {
                    return Err(format!(
                        "stream {name}: {copies} copy(ies) exist after asking for {replicas} (has the cluster {replicas} servers?)"
                    ));
                }
                done.push(format!("{name}: changed (it had {})", d.join(", ")));
            }
            Err(e) if is_not_found(&e) => {
                js.create_stream(want.clone())
                    .await
                    .map_err(|e| format!("create stream {name}: {e}"))?;
                done.push(format!("{name}: created with {replicas} replica(s)"));
            }
            Err(e) => return Err(format!("stream {name}: {e}")),
        }
    }
    Ok(done)
}

/// The copies of a stream that exist: its leader and the other peers of its group.
fn copies(info: &jetstream::stream::Info) -> usize {
    info.cluster.as_ref().map_or(1, |c| 1 + c.replicas.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_with_other_settings_is_described() {
        let [want, ..] = wanted(3);
        assert!(differences(&want, &want).is_empty());
        let have = Config {
            num_replicas: 1,
            max_age: Duration::ZERO,
            ..want.clone()
        };
        let d = differences(&have, &want);
        assert_eq!(d.len(), 2, "{d:?}");
        assert!(d[0].contains("1 replica(s), not 3"), "{d:?}");
        // A server reports an unset replica count as 0: one copy.
        let unset = Config {
            num_replicas: 0,
            ..want.clone()
        };
        assert_eq!(differences(&unset, &wanted(1)[0]), Vec::<String>::new());
    }
}
