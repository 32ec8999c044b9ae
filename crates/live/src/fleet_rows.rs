//! One row per unit of `snbuf fleet status`: the columns and their cells, shared by the one-shot
//! table and the live view so the two never disagree.

/// Column titles, and whether each is a number (aligned to the right).
pub const HEADER: [(&str, bool); 10] = [
    ("unit", false),
    ("state", false),
    ("last seen", true),
    ("links", true),
    ("buffer fill", true),
    ("durable up to (ticks)", true),
    ("bursts", true),
    ("last burst", false),
    ("missed", true),
    ("export", false),
];

/// One unit's row, in the order of [`HEADER`].
pub fn unit_cells(u: &snbuf_fleet::UnitView) -> Vec<String> {
    let s = &u.status;
    vec![
        s.unit.clone(),
        if u.missing {
            "MISSING".into()
        } else {
            s.state.to_string()
        },
        format!("{:.1} s ago", u.silent_s),
        s.links.to_string(),
        format!("{:.0}%", s.buffer_fill * 100.0),
        s.durable_watermark
            .iter()
            .flatten()
            .min()
            .map_or("-".into(), |t| t.to_string()),
        s.bursts_total.to_string(),
        s.last_burst
            .as_ref()
            .map_or("-".into(), |b| format!("{} ({})", b.burst_id, b.state)),
        s.missed_triggers.to_string(),
        s.export.as_ref().map_or("-".into(), |e| {
            format!(
                "{} exported, {} queued, lag {:.0} s",
                e.exported_total, e.queued, e.lag_s
            )
        }),
    ]
}
