//! `snbuf emit`: a detector as its own process.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use snbuf_quantity::values::{parse_duration_nonzero, parse_on_off};

/// A signed duration in seconds: `-1d`, `+90s`, `2h`.
fn parse_signed_seconds(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let (sign, rest) = match t.strip_prefix('-') {
        Some(r) => (-1.0, r),
        None => (1.0, t.strip_prefix('+').unwrap_or(t)),
    };
    snbuf_quantity::parse_duration(rest)
        .map(|d| sign * d.as_secs_f64())
        .map_err(|e| e.to_string())
}

#[derive(Args, Debug, Clone)]
pub struct EmitArgs {
    /// Where to send: udp://HOST:PORT (a `snbuf serve --source udp://...` or `record`).
    #[arg(long, value_name = "URL")]
    pub to: String,
    /// Links to send (default 1, or one per --replay file). Link N sends under stream_id N.
    #[arg(long)]
    pub links: Option<u32>,
    /// Frame type: wibeth (the default), tdeeth, daphneeth-stream (one frame per datagram, routed
    /// by stream_id), or any other type for a single link.
    #[arg(long, default_value = "wibeth")]
    pub frame: String,
    /// Rate per link (default: the frame type's own, 219.7 MB/s for WIBEth, as a detector
    /// sends). Below it the link is a sub-sampled detector: one frame in k, on the detector's own
    /// clock, so a second of data is still a second at any rate. The receiver learns the frames'
    /// spacing from the stream; its --rate-per-link only sizes its buffers.
    #[arg(long, value_name = "RATE")]
    pub rate_per_link: Option<String>,
    /// How far the detector's clock is from this machine's wall clock: `-1d` sends timestamps a
    /// day behind it (a timing system not set to NTP time, a replay of last year's run).
    #[arg(long, value_name = "TIME", allow_hyphen_values = true, value_parser = parse_signed_seconds, default_value = "0")]
    pub clock_offset: f64,
    /// Send this DUNE raw recording (frames back to back) on a link, looping; repeat it, one
    /// file per link. Only timestamps and sequence numbers are rewritten.
    #[arg(long, value_name = "FILE")]
    pub replay: Vec<PathBuf>,
    /// The stream_id each link sends under, in link order (default 0,1,2,...).
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub streams: Vec<u8>,
    /// How long to send (default: until Ctrl-C or SIGTERM).
    #[arg(long, value_name = "TIME", value_parser = parse_duration_nonzero)]
    pub duration: Option<Duration>,
    /// The CPU to send from (default: the last this process may use). One CPU keeps each
    /// link's datagrams in order on loopback.
    #[arg(long, value_name = "N")]
    pub cpu: Option<usize>,
    /// Keep and print each link's digest of what it sent: frames, first and last timestamp, and
    /// a CRC-32C of every byte (which costs a pass over the data).
    #[arg(long)]
    pub digest: bool,
    /// Send each link's due frames as one UDP_SEGMENT (GSO) call that the kernel cuts into one
    /// datagram per frame (default on; where the kernel refuses it, off, and the summary says
    /// why).
    #[arg(long, value_name = "on|off", value_parser = parse_on_off, default_value = "on", action = clap::ArgAction::Set)]
    pub gso: bool,
    /// Write the summary and the digests as JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}
