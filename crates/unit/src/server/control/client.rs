//! The client side of the control socket: one request sent, its reply read, with deadlines
//! (`snbuf trigger`, `status`, the live view, the tests).

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use super::ControlError;
use crate::protocol::Request;

/// Sends one request to a server and returns its reply, typed: a refusal is an `Err(Refused)`.
pub fn ask<T: serde::de::DeserializeOwned>(
    socket: &Path,
    req: &Request,
) -> Result<T, ControlError> {
    let reply = request(
        socket,
        &serde_json::to_value(req).expect("requests serialise"),
    )?;
    if reply.get("ok") != Some(&Value::Bool(true)) {
        let why = reply
            .get("error")
            .and_then(Value::as_str)
            .unwrap_or("refused without a reason");
        return Err(ControlError::Refused(why.to_string()));
    }
    serde_json::from_value(reply).map_err(|e| ControlError::BadReply {
        path: socket.to_path_buf(),
        what: e.to_string(),
    })
}

/// Sends one request to a server and returns its reply.
pub fn request(socket: &Path, req: &Value) -> Result<Value, ControlError> {
    let mut s = UnixStream::connect(socket).map_err(|cause| ControlError::NotRunning {
        path: socket.to_path_buf(),
        cause,
    })?;
    let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
    let _ = s.set_write_timeout(Some(Duration::from_secs(30)));
    writeln!(s, "{req}").map_err(|cause| ControlError::Io {
        path: socket.to_path_buf(),
        cause,
    })?;
    let mut line = String::new();
    BufReader::new(s.take(16 << 20))
        .read_line(&mut line)
        .map_err(|cause| ControlError::Io {
            path: socket.to_path_buf(),
            cause,
        })?;
    serde_json::from_str(line.trim()).map_err(|e| ControlError::BadReply {
        path: socket.to_path_buf(),
        what: e.to_string(),
    })
}
