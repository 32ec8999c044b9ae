//! Frame types: what one readout link delivers, how big, and how far apart in time.
//!
//! The numbers are DUNE's (DESIGN.md "The workload"): a ProtoDUNE WIB superchunk is 12 frames
//! of 464 B = 5568 B covering 12 x 25 = 300 ticks of the 50 MHz timing clock (0.93 GB/s per
//! link); a WIB2 superchunk is 5664 B at 62.5 MHz; a WIBEth frame is 7200 B covering 2048 ticks
//! of 62.5 MHz (30.5 kHz, 0.22 GB/s).
//!
//! Every frame snbuf emulates or replays carries its 64-bit timestamp in bytes 0..8 and its
//! 64-bit sequence number in bytes 8..16 (little-endian), where readers find them without
//! parsing the detector format. Replayed frames get both overwritten, as DUNE's own emulator
//! rewrites timestamps when it loops a file.

use std::fmt;
use std::str::FromStr;

/// Bytes 0..8: the frame's timestamp; bytes 8..16: its sequence number.
pub const TIMESTAMP_OFFSET: usize = 0;
pub const SEQUENCE_OFFSET: usize = 8;
/// The smallest frame that can carry both.
pub const MIN_FRAME_BYTES: u32 = 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameType {
    /// ProtoDUNE WIB superchunk: 5568 B, 300 ticks at 50 MHz.
    ProtoDuneWib,
    /// WIB2 superchunk: 5664 B, 62.5 MHz.
    Wib2,
    /// WIBEth: 7200 B, 2048 ticks at 62.5 MHz.
    WibEth,
    /// Any size and tick step, at 50 MHz: `custom:BYTES:TICKS`.
    Custom {
        frame_bytes: u32,
        ticks_per_frame: u64,
    },
}

impl FrameType {
    pub fn frame_bytes(self) -> u32 {
        match self {
            FrameType::ProtoDuneWib => 5568,
            FrameType::Wib2 => 5664,
            FrameType::WibEth => 7200,
            FrameType::Custom { frame_bytes, .. } => frame_bytes,
        }
    }

    pub fn ticks_per_frame(self) -> u64 {
        match self {
            FrameType::ProtoDuneWib => 300,
            // 12 frames of 32 ticks at 62.5 MHz per superchunk.
            FrameType::Wib2 => 384,
            FrameType::WibEth => 2048,
            FrameType::Custom {
                ticks_per_frame, ..
            } => ticks_per_frame,
        }
    }

    pub fn clock_hz(self) -> u64 {
        match self {
            FrameType::ProtoDuneWib | FrameType::Custom { .. } => 50_000_000,
            FrameType::Wib2 | FrameType::WibEth => 62_500_000,
        }
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
        (d.as_secs_f64() * self.clock_hz() as f64).round() as u64
    }

    pub fn name(self) -> String {
        match self {
            FrameType::ProtoDuneWib => "protodune-wib".into(),
            FrameType::Wib2 => "wib2".into(),
            FrameType::WibEth => "wibeth".into(),
            FrameType::Custom {
                frame_bytes,
                ticks_per_frame,
            } => format!("custom:{frame_bytes}:{ticks_per_frame}"),
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
    #[error("unknown frame type '{0}' (known: protodune-wib, wib2, wibeth, custom:BYTES:TICKS)")]
    Unknown(String),
    #[error("custom frame type '{0}': expected custom:BYTES:TICKS with BYTES >= {MIN_FRAME_BYTES} and TICKS >= 1")]
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
            _ => {
                let Some(rest) = t.strip_prefix("custom:") else {
                    return Err(FrameTypeError::Unknown(s.to_string()));
                };
                let bad = || FrameTypeError::BadCustom(s.to_string());
                let (b, k) = rest.split_once(':').ok_or_else(bad)?;
                let frame_bytes: u32 = b.parse().map_err(|_| bad())?;
                let ticks_per_frame: u64 = k.parse().map_err(|_| bad())?;
                if frame_bytes < MIN_FRAME_BYTES || ticks_per_frame == 0 {
                    return Err(bad());
                }
                Ok(FrameType::Custom {
                    frame_bytes,
                    ticks_per_frame,
                })
            }
        }
    }
}

/// Writes the timestamp and sequence number into a frame.
pub fn stamp(frame: &mut [u8], timestamp: u64, sequence: u64) {
    frame[TIMESTAMP_OFFSET..TIMESTAMP_OFFSET + 8].copy_from_slice(&timestamp.to_le_bytes());
    frame[SEQUENCE_OFFSET..SEQUENCE_OFFSET + 8].copy_from_slice(&sequence.to_le_bytes());
}

/// Reads a frame's timestamp.
pub fn timestamp_of(frame: &[u8]) -> u64 {
    u64::from_le_bytes(
        frame[TIMESTAMP_OFFSET..TIMESTAMP_OFFSET + 8]
            .try_into()
            .expect("8 bytes"),
    )
}

/// Reads a frame's sequence number.
pub fn sequence_of(frame: &[u8]) -> u64 {
    u64::from_le_bytes(
        frame[SEQUENCE_OFFSET..SEQUENCE_OFFSET + 8]
            .try_into()
            .expect("8 bytes"),
    )
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
    }

    #[test]
    fn names_parse_and_round_trip() {
        for t in [
            FrameType::ProtoDuneWib,
            FrameType::Wib2,
            FrameType::WibEth,
            FrameType::Custom {
                frame_bytes: 100,
                ticks_per_frame: 7,
            },
        ] {
            assert_eq!(t.name().parse::<FrameType>().unwrap(), t);
        }
        assert!(matches!(
            "wib3".parse::<FrameType>(),
            Err(FrameTypeError::Unknown(_))
        ));
        assert!(matches!(
            "custom:8:1".parse::<FrameType>(),
            Err(FrameTypeError::BadCustom(_))
        ));
        assert!(matches!(
            "custom:100:0".parse::<FrameType>(),
            Err(FrameTypeError::BadCustom(_))
        ));
        assert!(matches!(
            "custom:abc".parse::<FrameType>(),
            Err(FrameTypeError::BadCustom(_))
        ));
    }

    #[test]
    fn stamps_are_little_endian_at_fixed_offsets() {
        let mut f = vec![0u8; 64];
        stamp(&mut f, 0x0102_0304_0506_0708, 42);
        assert_eq!(&f[..8], &[8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(timestamp_of(&f), 0x0102_0304_0506_0708);
        assert_eq!(sequence_of(&f), 42);
    }
}
