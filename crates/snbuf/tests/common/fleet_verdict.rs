//! One rule for what became of a trigger on a unit, for every fleet trial: recorded means its
//! own window whole on disk (every frame, every link, `snbuf verify` says so); anything less is a
//! loss unless nothing could have done better (the unit was down when it was published, or was
//! killed while recording it and its restart recovered the burst valid).

/// A burst on a unit's disk that names the trigger, as `snbuf verify --json` read it.
#[derive(Clone, Debug)]
pub struct BurstSeen {
    pub name: String,
    /// The manifest's state: sealed, recovered, recording, failed.
    pub state: String,
    pub valid: bool,
    /// Whether this trigger's own window is whole in it (`triggers[].whole`; None: the burst
    /// does not list the trigger's window).
    pub whole: Option<bool>,
    /// What of the window is missing, as `verify` counts it.
    pub frames_missing: u64,
}

/// What the trial knows of one unit around one trigger.
#[derive(Clone, Copy, Debug, Default)]
pub struct UnitAt {
    /// Killed, or not yet buffering again after a restart, when the trigger was published.
    pub down: bool,
    /// Killed after the trigger was published, before its burst could have been sealed.
    pub killed_while_recording: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Its whole window is on disk, verified.
    Whole,
    /// Nothing could have done better; why.
    Excused(&'static str),
    /// A valid burst, but not the whole window: counted as lost.
    WithLoss(String),
    /// Neither recorded nor excused.
    Lost(String),
}

impl Verdict {
    pub fn is_failure(&self) -> bool {
        matches!(self, Verdict::WithLoss(_) | Verdict::Lost(_))
    }
}

/// The verdict for one unit and one trigger: `bursts` naming it, the reasons of its `missed`
/// events, and the unit's state around it.
pub fn verdict(bursts: &[BurstSeen], missed: &[String], unit: UnitAt) -> Verdict {
    if bursts.iter().any(|b| b.valid && b.whole == Some(true)) {
        return Verdict::Whole;
    }
    if unit.killed_while_recording {
        // Killed mid-window: the restarted unit must have recovered what was written, valid. A
        // burst sealed before the kill had its whole chance: not whole is a loss.
        return match bursts.first() {
            Some(b) if b.valid && b.state == "recovered" => {
                Verdict::Excused("killed while recording: its burst recovered and valid")
            }
            Some(b) => Verdict::Lost(format!(
                "killed while recording, and burst {} was not recovered valid (state {}, valid {})",
                b.name, b.state, b.valid
            )),
            None if missed.iter().any(|w| w.contains("before its burst began")) => {
                Verdict::Excused("killed before its burst began")
            }
            None if unit.down => Verdict::Excused("unit down when it was published"),
            None => Verdict::Lost("killed while recording, and no burst or miss said".into()),
        };
    }
    if let Some(b) = bursts.first() {
        if !b.valid {
            return Verdict::Lost(format!("burst {} not valid (state {})", b.name, b.state));
        }
        if unit.down {
            // Published while the unit was down, recorded late in part: all it could do.
            return Verdict::Excused("unit down when it was published: recorded what was left");
        }
        return Verdict::WithLoss(format!(
            "burst {}: {} frame(s) of its window missing{}",
            b.name,
            b.frames_missing,
            if b.whole.is_none() {
                " (the burst does not list its window)"
            } else {
                ""
            }
        ));
    }
    match missed.first() {
        Some(_) if unit.down => Verdict::Excused("unit down when it was published"),
        Some(why) => Verdict::Lost(format!("missed while running: {why}")),
        None if unit.down => Verdict::Lost("unit down, and never said missed".into()),
        None => Verdict::Lost("neither recorded nor reported missed".into()),
    }
}
