//! Full-screen live views for the shift crew: `snbuf status --watch` (one unit: per link the
//! input rate, buffer fill, backlog, durable watermark, loss and failure; the burst being
//! recorded with its progress through the window and the time left; past bursts with their
//! state and export) and `snbuf fleet status --watch` (one row per unit, missing units
//! highlighted). Refreshed about once a second; `q` or Esc quits. A server that goes away is
//! shown as such, and the view keeps trying.

#![forbid(unsafe_code)]

pub mod fleet_rows;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use ratatui::crossterm::event::{self, Event, KeyCode, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Paragraph, Row, Table};
use ratatui::{DefaultTerminal, Frame};
use snbuf_quantity::Rate;
use snbuf_unit::protocol::{Request, UnitStatus};

/// How often the views ask for fresh state.
const REFRESH: Duration = Duration::from_secs(1);

/// Runs `draw` on a full-screen terminal, fetching with `fetch` every REFRESH, until q/Esc/^C.
fn run<S>(
    mut fetch: impl FnMut() -> S,
    draw: impl Fn(&mut Frame, &S, &mut History),
) -> anyhow::Result<()> {
    let mut terminal: DefaultTerminal = ratatui::init();
    let mut history = History::default();
    let result = (|| -> anyhow::Result<()> {
        loop {
            let state = fetch();
            terminal.draw(|f| draw(f, &state, &mut history))?;
            let until = Instant::now() + REFRESH;
            while let Some(left) = until.checked_duration_since(Instant::now()) {
                if event::poll(left)? {
                    if let Event::Key(k) = event::read()? {
                        let ctrl_c = k.code == KeyCode::Char('c')
                            && k.modifiers.contains(KeyModifiers::CONTROL);
                        if matches!(k.code, KeyCode::Char('q') | KeyCode::Esc) || ctrl_c {
                            return Ok(());
                        }
                    }
                }
            }
        }
    })();
    ratatui::restore();
    result
}

/// Counters seen at the previous refresh, for rates.
#[derive(Default)]
struct History {
    frames_in: BTreeMap<u64, (Instant, u64)>,
}

impl History {
    /// Frames per second of `link` since the last call.
    fn rate(&mut self, link: u64, frames_in: u64) -> Option<f64> {
        let now = Instant::now();
        let prev = self.frames_in.insert(link, (now, frames_in));
        prev.and_then(|(t, n)| {
            let dt = now.duration_since(t).as_secs_f64();
            (dt > 0.0 && frames_in >= n).then(|| (frames_in - n) as f64 / dt)
        })
    }
}

/// `snbuf status --watch`.
pub fn unit_status(socket: &Path) -> anyhow::Result<()> {
    let socket = socket.to_path_buf();
    run(
        move || {
            snbuf_unit::server::control::ask::<UnitStatus>(&socket, &Request::Status)
                .map_err(|e| e.to_string())
        },
        draw_unit,
    )
}

/// One screen of the live view, top to bottom: the unit, its links, the burst being recorded,
/// the bursts before it.
fn draw_unit(f: &mut Frame, state: &Result<UnitStatus, String>, history: &mut History) {
    let [head, links, burst, past, help] = Layout::vertical([
        Constraint::Length(3),
        Constraint::Min(6),
        Constraint::Length(4),
        Constraint::Length(8),
        Constraint::Length(1),
    ])
    .areas(f.area());
    f.render_widget(
        Paragraph::new("q: quit   refreshed every second")
            .style(Style::default().fg(Color::DarkGray)),
        help,
    );
    let s = match state {
        Ok(s) => s,
        Err(e) => {
            let p = Paragraph::new(vec![
                Line::from("SERVER UNREACHABLE")
                    .style(Style::default().fg(Color::Red).add_modifier(Modifier::BOLD)),
                Line::from(e.clone()),
                Line::from("trying again every second"),
            ])
            .block(Block::default().borders(Borders::ALL).title(" snbuf unit "));
            f.render_widget(p, head.union(links));
            return;
        }
    };
    draw_unit_head(f, s, head);
    draw_unit_links(f, s, history, links);
    draw_unit_burst(f, s, burst);
    draw_unit_past(f, s, past);
}

/// The unit's line: recording or idle, and a stream that is not what it was configured for.
fn draw_unit_head(f: &mut Frame, s: &UnitStatus, head: ratatui::layout::Rect) {
    let title = format!(" snbuf unit: {}, up {:.0} s ", s.summary(), s.uptime_s);
    let recording = s.recording_burst.as_ref();
    let mismatched: Vec<String> = s
        .link_rates
        .iter()
        .filter(|r| r.mismatch)
        .map(|r| r.link.to_string())
        .collect();
    let mut summary = match recording {
        Some(b) => format!("RECORDING burst {}", b.burst_id),
        None => format!(
            "idle: ready for a trigger (next burst's files: {})",
            s.next_burst
        ),
    };
    if !mismatched.is_empty() {
        summary += &format!(
            "   STREAM MISMATCH on link(s) {}: not the clock or rate configured",
            mismatched.join(",")
        );
    }
    f.render_widget(
        Paragraph::new(summary).block(Block::default().borders(Borders::ALL).title(title)),
        head,
    );
}

/// One link's row: its input rate, what its buffer holds, backlog, durable watermark, loss, in
/// red when it lost frames, failed or runs at a rate it was not configured for.
fn link_row(
    l: &snbuf_unit::protocol::LinkStatus,
    s: &UnitStatus,
    history: &mut History,
    frame_bytes: f64,
    capacity: f64,
) -> Row<'static> {
    let rate = history.rate(l.counters.link as u64, l.counters.frames_in);
    let measured = s.link_rates.iter().find(|r| r.link == l.counters.link);
    let mismatch = measured.is_some_and(|r| r.mismatch);
    let style = if l.counters.failed || l.counters.lost_frames > 0 || mismatch {
        Style::default().fg(Color::Red)
    } else {
        Style::default()
    };
    Row::new(vec![
        l.counters.link.to_string(),
        rate.map_or("-".into(), |r| Rate(r * frame_bytes).to_string()),
        measured
            .and_then(|r| r.buffer_span_s)
            .map_or("-".into(), |s| format!("{s:.2} s")),
        format!(
            "{:.0}%",
            100.0 * l.counters.buffer_fill_frames as f64 / capacity
        ),
        format!(
            "{:.0}%",
            100.0 * l.counters.backlog_frames as f64 / capacity
        ),
        l.counters.durable_chunks.to_string(),
        l.counters
            .durable_until_timestamp
            .map_or("-".into(), |t| t.to_string()),
        l.counters.lost_frames.to_string(),
        if l.counters.failed {
            "FAILED".into()
        } else if mismatch {
            "MISMATCH".into()
        } else {
            "ok".into()
        },
    ])
    .style(style)
}

/// A row per link: input rate, what its buffer holds, backlog, durable watermark, loss.
fn draw_unit_links(
    f: &mut Frame,
    s: &UnitStatus,
    history: &mut History,
    links: ratatui::layout::Rect,
) {
    let frame_bytes = s.frame_bytes();
    let capacity = (s.buffer_capacity_frames as f64).max(1.0);
    let rows: Vec<Row> = s
        .live
        .iter()
        .map(|l| link_row(l, s, history, frame_bytes, capacity))
        .collect();
    let table = Table::new(
        rows,
        [
            Constraint::Length(5),
            Constraint::Length(12),
            Constraint::Length(9),
            Constraint::Length(8),
            Constraint::Length(8),
            Constraint::Length(8),
            Constraint::Length(22),
            Constraint::Length(8),
            Constraint::Length(9),
        ],
    )
    .header(
        Row::new([
            "link",
            "input",
            "holds",
            "fill",
            "backlog",
            "chunks",
            "durable until (ticks)",
            "lost",
            "state",
        ])
        .style(Style::default().add_modifier(Modifier::BOLD)),
    )
    .block(Block::default().borders(Borders::ALL).title(" links "));
    f.render_widget(table, links);
}

/// How much of the burst being recorded is durable, and how far its window's end is.
fn draw_unit_burst(f: &mut Frame, s: &UnitStatus, burst: ratatui::layout::Rect) {
    let burst_text = match s.recording_burst.as_ref() {
        Some(b) => {
            let (start, end) = (
                b.window.window_start_timestamp,
                b.window.window_end_timestamp,
            );
            let durable = s
                .live
                .iter()
                .filter_map(|l| l.counters.durable_until_timestamp)
                .min()
                .unwrap_or(start);
            let done =
                (durable.saturating_sub(start)) as f64 / (end.saturating_sub(start)).max(1) as f64;
            let newest = s.newest_timestamp.unwrap_or(start);
            let left_s = end.saturating_sub(newest) as f64 / s.clock_hz.max(1) as f64;
            format!(
                "burst {}: {:.0}% of the window durable; its end is {:.1} s away",
                b.burst_id,
                100.0 * done.clamp(0.0, 1.0),
                left_s
            )
        }
        None => "no burst being recorded".into(),
    };
    f.render_widget(
        Paragraph::new(burst_text)
            .block(Block::default().borders(Borders::ALL).title(" recording ")),
        burst,
    );
}

/// The bursts recorded before, newest first, with their verdict and whether exported.
fn draw_unit_past(f: &mut Frame, s: &UnitStatus, past: ratatui::layout::Rect) {
    let past_rows: Vec<Row> = s
        .bursts
        .iter()
        .rev()
        .map(|b| {
            let exported = b
                .dir
                .as_ref()
                .is_some_and(|d| d.join(snbuf_export::EXPORTED).exists());
            Row::new(vec![
                b.burst_id.clone(),
                b.state.to_string(),
                b.frames.map_or("-".into(), |f| f.to_string()),
                b.lost_frames.map_or("-".into(), |f| f.to_string()),
                if b.valid {
                    "valid".into()
                } else {
                    "NOT VALID".into()
                },
                if exported {
                    "exported".into()
                } else {
                    "-".into()
                },
            ])
            .style(if b.valid {
                Style::default()
            } else {
                Style::default().fg(Color::Red)
            })
        })
        .collect();
    let past_table = Table::new(
        past_rows,
        [
            Constraint::Min(24),
            Constraint::Length(10),
            Constraint::Length(10),
            Constraint::Length(8),
            Constraint::Length(10),
            Constraint::Length(10),
        ],
    )
    .header(
        Row::new(["burst", "state", "frames", "lost", "verify", "export"])
            .style(Style::default().add_modifier(Modifier::BOLD)),
    )
    .block(
        Block::default()
            .borders(Borders::ALL)
            .title(format!(" past bursts ({} in all) ", s.bursts_total)),
    );
    f.render_widget(past_table, past);
}

/// `snbuf fleet status --watch`.
pub fn fleet_status(opts: &snbuf_fleet::NatsOptions) -> anyhow::Result<()> {
    let opts = opts.clone();
    run(
        move || snbuf_fleet::fleet_status(&opts).map_err(|e| e.to_string()),
        draw_fleet,
    )
}

fn draw_fleet(f: &mut Frame, state: &Result<Vec<snbuf_fleet::UnitView>, String>, _: &mut History) {
    let [body, help] =
        Layout::vertical([Constraint::Min(3), Constraint::Length(1)]).areas(f.area());
    f.render_widget(
        Paragraph::new("q: quit   refreshed every second")
            .style(Style::default().fg(Color::DarkGray)),
        help,
    );
    let units = match state {
        Ok(u) => u,
        Err(e) => {
            f.render_widget(
                Paragraph::new(vec![
                    Line::from("NATS UNREACHABLE")
                        .style(Style::default().fg(Color::Red).add_modifier(Modifier::BOLD)),
                    Line::from(e.clone()),
                    Line::from("trying again every second"),
                ])
                .block(
                    Block::default()
                        .borders(Borders::ALL)
                        .title(" snbuf fleet "),
                ),
                body,
            );
            return;
        }
    };
    let missing = units.iter().filter(|u| u.missing).count();
    let rows: Vec<Row> = units
        .iter()
        .map(|u| {
            let row = Row::new(fleet_rows::unit_cells(u));
            if u.missing {
                row.style(
                    Style::default()
                        .fg(Color::White)
                        .bg(Color::Red)
                        .add_modifier(Modifier::BOLD),
                )
            } else {
                row
            }
        })
        .collect();
    let table = Table::new(
        rows,
        [
            Constraint::Min(12),
            Constraint::Length(10),
            Constraint::Length(11),
            Constraint::Length(6),
            Constraint::Length(11),
            Constraint::Length(21),
            Constraint::Length(7),
            Constraint::Min(20),
            Constraint::Length(7),
            Constraint::Min(20),
        ],
    )
    .header(
        Row::new(fleet_rows::HEADER.map(|(title, _)| title))
            .style(Style::default().add_modifier(Modifier::BOLD)),
    )
    .block(Block::default().borders(Borders::ALL).title(format!(
        " snbuf fleet: {} units, {missing} MISSING ",
        units.len()
    )));
    f.render_widget(table, body);
}
