//! Frame types: what one readout link delivers, how big, how far apart in time, and the name a
//! manifest and the command line call it by.
//!
//! The numbers are DUNE's (docs/DESIGN.md, "The workload"; public DUNE-DAQ code,
//! fddetdataformats): a ProtoDUNE WIB superchunk is 12 frames of 464 B = 5568 B covering
//! 12 x 25 = 300 ticks of the 50 MHz timing clock (0.93 GB/s per link); a WIB2 superchunk is
//! 12 x 472 B = 5664 B covering 12 x 32 ticks of 62.5 MHz; a WIBEth frame is 7200 B covering
//! 2048 ticks of 62.5 MHz (30.5 kHz, 0.22 GB/s); a TDEEth frame 7200 B and 2000 ticks; a
//! DAPHNE Ethernet stream frame 2008 B and 280 ticks. Where each keeps its timestamp and
//! identity is its `layout()`.

use std::fmt;
use std::str::FromStr;

use crate::layout::{FrameLayout, HeaderKind, TimestampField};

/// The smallest custom frame: room for a 64-bit timestamp.
pub const MIN_FRAME_BYTES: u32 = 8;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameType {
    /// ProtoDUNE WIB superchunk: 12 x 464 B, 300 ticks at 50 MHz.
    ProtoDuneWib,
    /// WIB2 superchunk: 12 x 472 B, 384 ticks at 62.5 MHz.
    Wib2,
    /// WIBEth: 7200 B, 2048 ticks at 62.5 MHz, one UDP datagram each.
    WibEth,
    /// TDEEth (vertical drift top): 7200 B, 2000 ticks at 62.5 MHz.
    TdeEth,
    /// DAPHNE Ethernet stream (photon detectors): 2008 B, 280 ticks at 62.5 MHz.
    DaphneEthStream,
    /// Any size and tick step at 50 MHz, with a little-endian 64-bit timestamp at
    /// `timestamp_offset` (0 unless given): `custom:BYTES:TICKS[:OFFSET]`.
    Custom {
        frame_bytes: u32,
        ticks_per_frame: u64,
        timestamp_offset: u32,
    },
}

impl FrameType {
    /// Where the frame keeps its timestamp, sequence number and identity.
    pub fn layout(self) -> FrameLayout {
        let daq_eth = |frame_bytes, ticks| FrameLayout {
            frame_bytes,
            subframes: 1,
            ticks_per_frame: ticks,
            clock_hz: 62_500_000,
            timestamp: TimestampField::U64 { offset: 8 },
            header: HeaderKind::DaqEth,
        };
        match self {
            FrameType::ProtoDuneWib => FrameLayout {
                frame_bytes: 12 * 464,
                subframes: 12,
                ticks_per_frame: 12 * 25,
                clock_hz: 50_000_000,
                timestamp: TimestampField::Wib1,
                header: HeaderKind::Wib1,
            },
            FrameType::Wib2 => FrameLayout {
                frame_bytes: 12 * 472,
                subframes: 12,
                ticks_per_frame: 12 * 32,
                clock_hz: 62_500_000,
                timestamp: TimestampField::Wib2,
                header: HeaderKind::Wib2,
            },
            FrameType::WibEth => daq_eth(7200, 2048),
            FrameType::TdeEth => daq_eth(7200, 2000),
            FrameType::DaphneEthStream => daq_eth(2008, 280),
            FrameType::Custom {
                frame_bytes,
                ticks_per_frame,
                timestamp_offset,
            } => FrameLayout {
                frame_bytes,
                subframes: 1,
                ticks_per_frame,
                clock_hz: 50_000_000,
                timestamp: TimestampField::U64 {
                    offset: timestamp_offset as usize,
                },
                header: HeaderKind::None,
            },
        }
    }

    pub fn frame_bytes(self) -> u32 {
        self.layout().frame_bytes
    }

    /// Ticks from one stored frame (a whole superchunk) to the next.
    pub fn ticks_per_frame(self) -> u64 {
        self.layout().ticks_per_frame
    }

    pub fn clock_hz(self) -> u64 {
        self.layout().clock_hz
    }

    /// Frames per second at the detector's own rate.
    pub fn native_frames_per_s(self) -> f64 {
        self.clock_hz() as f64 / self.ticks_per_frame() as f64
    }

    /// Bytes per second at the detector's own rate (0.93 GB/s for a WIB link).
    pub fn native_bytes_per_s(self) -> f64 {
        self.native_frames_per_s() * self.frame_bytes() as f64
    }

    /// Ticks in a duration, at this frame type's clock.
    pub fn ticks(self, d: std::time::Duration) -> u64 {
        crate::DetectorClock::of(self).ticks(d)
    }

    /// DUNE's name for the fragment these frames make (daqdataformats FragmentType), as the
    /// offline format files it.
    pub fn fragment_type(self) -> Option<(u32, &'static str)> {
        match self {
            FrameType::ProtoDuneWib => Some((1, "ProtoWIB")),
            FrameType::Wib2 => Some((2, "WIB")),
            FrameType::WibEth => Some((12, "WIBEth")),
            FrameType::TdeEth => Some((15, "TDEEth")),
            FrameType::DaphneEthStream => Some((19, "DAPHNEEthStream")),
            FrameType::Custom { .. } => None,
        }
    }

    pub fn name(self) -> String {
        match self {
            FrameType::ProtoDuneWib => "protodune-wib".into(),
            FrameType::Wib2 => "wib2".into(),
            FrameType::WibEth => "wibeth".into(),
            FrameType::TdeEth => "tdeeth".into(),
            FrameType::DaphneEthStream => "daphneeth-stream".into(),
            FrameType::Custom {
                frame_bytes,
                ticks_per_frame,
                timestamp_offset: 0,
            } => format!("custom:{frame_bytes}:{ticks_per_frame}"),
            FrameType::Custom {
                frame_bytes,
                ticks_per_frame,
                timestamp_offset,
            } => format!("custom:{frame_bytes}:{ticks_per_frame}:{timestamp_offset}"),
        }
    }
}

impl fmt::Display for FrameType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FrameTypeError {
    #[error("unknown frame type '{0}' (known: protodune-wib, wib2, wibeth, tdeeth, daphneeth-stream, custom:BYTES:TICKS[:OFFSET])")]
    Unknown(String),
    #[error("custom frame type '{0}': expected custom:BYTES:TICKS[:OFFSET] with BYTES >= {MIN_FRAME_BYTES}, TICKS >= 1 and the 8-byte timestamp at OFFSET inside the frame")]
    BadCustom(String),
}

impl FromStr for FrameType {
    type Err = FrameTypeError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim().to_ascii_lowercase();
        match t.as_str() {
            "protodune-wib" | "wib" => Ok(FrameType::ProtoDuneWib),
            "wib2" => Ok(FrameType::Wib2),
            "wibeth" => Ok(FrameType::WibEth),
            "tdeeth" => Ok(FrameType::TdeEth),
            "daphneeth-stream" => Ok(FrameType::DaphneEthStream),
            _ => {
                let Some(rest) = t.strip_prefix("custom:") else {
                    return Err(FrameTypeError::Unknown(s.to_string()));
                };
                let bad = || FrameTypeError::BadCustom(s.to_string());
                let mut parts = rest.split(':');
                let frame_bytes: u32 = parts.next().ok_or_else(bad)?.parse().map_err(|_| bad())?;
                let ticks_per_frame: u64 =
                    parts.next().ok_or_else(bad)?.parse().map_err(|_| bad())?;
                let timestamp_offset: u32 = match parts.next() {
                    Some(o) => o.parse().map_err(|_| bad())?,
                    None => 0,
                };
                if parts.next().is_some()
                    || frame_bytes < MIN_FRAME_BYTES
                    || ticks_per_frame == 0
                    || timestamp_offset as u64 + 8 > frame_bytes as u64
                {
                    return Err(bad());
                }
                Ok(FrameType::Custom {
                    frame_bytes,
                    ticks_per_frame,
                    timestamp_offset,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dune_numbers() {
        let wib = FrameType::ProtoDuneWib;
        assert_eq!(wib.frame_bytes(), 12 * 464);
        // 50 MHz / 300 ticks = 166 667 superchunks/s x 5568 B = 0.928 GB/s.
        assert!((wib.native_bytes_per_s() / 1e9 - 0.928).abs() < 0.001);
        assert!((FrameType::WibEth.native_frames_per_s() - 30_517.6).abs() < 1.0);
        assert!((FrameType::WibEth.native_bytes_per_s() / 1e9 - 0.2197).abs() < 0.001);
        assert_eq!(FrameType::Wib2.frame_bytes(), 5664);
        assert_eq!(FrameType::Wib2.ticks_per_frame(), 384);
        assert_eq!(FrameType::TdeEth.ticks_per_frame(), 2000);
        assert_eq!(FrameType::DaphneEthStream.frame_bytes(), 2008);
    }

    #[test]
    fn names_parse_and_round_trip() {
        for t in [
            FrameType::ProtoDuneWib,
            FrameType::Wib2,
            FrameType::WibEth,
            FrameType::TdeEth,
            FrameType::DaphneEthStream,
            FrameType::Custom {
                frame_bytes: 100,
                ticks_per_frame: 7,
                timestamp_offset: 0,
            },
            FrameType::Custom {
                frame_bytes: 100,
                ticks_per_frame: 7,
                timestamp_offset: 16,
            },
        ] {
            assert_eq!(t.name().parse::<FrameType>().unwrap(), t);
        }
        assert!(matches!(
            "wib3".parse::<FrameType>(),
            Err(FrameTypeError::Unknown(_))
        ));
        for bad in [
            "custom:4:1",
            "custom:100:0",
            "custom:abc",
            "custom:100:7:93",
            "custom:100:7:1:2",
        ] {
            assert!(
                matches!(bad.parse::<FrameType>(), Err(FrameTypeError::BadCustom(_))),
                "{bad}"
            );
        }
        assert_eq!(
            "custom:100:7:92"
                .parse::<FrameType>()
                .unwrap()
                .layout()
                .frame_bytes,
            100
        );
    }
}
