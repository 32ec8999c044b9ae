//! A one-node Garage (an S3-compatible object store) of a test's own, on 127.0.0.1, with a key
//! and a bucket `snbuf`: for the tests that export to a real object store.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{free_port, installed_tool, KillOnDrop};

fn run(c: &mut Command) -> std::process::Output {
    super::output_within(c, super::COMMAND_DEADLINE)
}

/// Environment variables for a client of the store.
pub type Env = Vec<(String, String)>;

/// A one-node Garage with a key and a bucket `snbuf`: the server and the client environment.
/// None (the test skips) without the binary.
pub fn garage(root: &Path) -> Option<(KillOnDrop, Env)> {
    let home_bin = std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo/bin/garage"));
    let bin = installed_tool(
        home_bin
            .into_iter()
            .chain([PathBuf::from("/usr/local/bin/garage")]),
        "SNBUF_REQUIRE_GARAGE",
        "garage: cargo install garage --locked",
    )?;
    let (s3, rpc, admin) = (free_port(), free_port(), free_port());
    std::fs::create_dir_all(root).unwrap();
    let cfg = root.join("garage.toml");
    std::fs::write(
        &cfg,
        format!(
            "metadata_dir = \"{m}\"\ndata_dir = \"{d}\"\ndb_engine = \"sqlite\"\nreplication_factor = 1\n\
             rpc_bind_addr = \"127.0.0.1:{rpc}\"\nrpc_public_addr = \"127.0.0.1:{rpc}\"\n\
             rpc_secret = \"{secret}\"\n[s3_api]\ns3_region = \"garage\"\napi_bind_addr = \"127.0.0.1:{s3}\"\n\
             root_domain = \".s3.garage.localhost\"\n[admin]\napi_bind_addr = \"127.0.0.1:{admin}\"\n",
            m = root.join("meta").display(),
            d = root.join("data").display(),
            secret = "0123456789abcdef".repeat(4),
        ),
    )
    .unwrap();
    let child = Command::new(&bin)
        .args(["-c", cfg.to_str().unwrap(), "server"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let server = KillOnDrop(child);
    let g = |args: &[&str]| -> String {
        let o = run(Command::new(&bin)
            .args(["-c", cfg.to_str().unwrap()])
            .args(args));
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let node = loop {
        let st = g(&["status"]);
        if let Some(l) = st.lines().find(|l| l.contains("NO ROLE ASSIGNED")) {
            break l.split_whitespace().next().unwrap().to_string();
        }
        assert!(Instant::now() < deadline, "garage did not start: {st}");
        std::thread::sleep(Duration::from_millis(200));
    };
    g(&["layout", "assign", "-z", "dc1", "-c", "1G", &node]);
    g(&["layout", "apply", "--version", "1"]);
    let key = g(&["key", "create", "snbuf-test"]);
    let field = |name: &str| {
        key.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().last())
            .unwrap_or_else(|| panic!("{name} not in {key}"))
            .to_string()
    };
    let (id, secret) = (field("Key ID"), field("Secret key"));
    g(&["bucket", "create", "snbuf"]);
    g(&[
        "bucket",
        "allow",
        "--read",
        "--write",
        "--owner",
        "snbuf",
        "--key",
        "snbuf-test",
    ]);
    let env = vec![
        (
            "SNBUF_S3_ENDPOINT".to_string(),
            format!("http://127.0.0.1:{s3}"),
        ),
        ("AWS_REGION".to_string(), "garage".to_string()),
        ("AWS_ACCESS_KEY_ID".to_string(), id),
        ("AWS_SECRET_ACCESS_KEY".to_string(), secret),
    ];
    Some((server, env))
}
