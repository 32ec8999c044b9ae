//! Who may trigger: a real nats-server running deploy/nats-secure.conf (roles from
//! deploy/nats-roles.conf, TLS with a CA made here), keys from `snbuf fleet keys`. The whole fleet
//! path works with roles and TLS on; a unit's key cannot send a trigger (and its unit records
//! nothing), nor delete or purge a stream; a monitor's cannot trigger; a missing, unknown or
//! wrong key and a wrong CA are refused at once with a clear error that shows no secret.
//!
//! Skips without nats-server or openssl, unless SNBUF_REQUIRE_NATS is set (as in CI).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, output_within, snbuf, stderr, wait_for_socket, KillOnDrop};
use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs `openssl` with `args` in `dir`; it must succeed.
fn openssl(dir: &Path, args: &[&str]) {
    let mut c = Command::new("openssl");
    c.args(args).current_dir(dir);
    let o = output_within(c, Duration::from_secs(60));
    assert!(o.status.success(), "openssl {args:?}: {}", stderr(&o));
}

/// A CA, and a certificate it signed for 127.0.0.1 (the server's); and a second CA that signed
/// nothing here (the wrong one).
fn certificates(dir: &Path) {
    let subj = |cn: &str| format!("/CN={cn}");
    for (key, cert, cn) in [
        ("ca-key.pem", "ca.pem", "snbuf test CA"),
        ("other-ca-key.pem", "other-ca.pem", "another CA"),
    ] {
        openssl(
            dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                key,
                "-out",
                cert,
                "-days",
                "2",
                "-subj",
                &subj(cn),
            ],
        );
    }
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server-key.pem",
            "-out",
            "server.csr",
            "-subj",
            "/CN=127.0.0.1",
        ],
    );
    std::fs::write(
        dir.join("ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
    )
    .unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca-key.pem",
            "-CAcreateserial",
            "-out",
            "server.pem",
            "-days",
            "2",
            "-extfile",
            "ext",
        ],
    );
}

/// The public keys `snbuf fleet keys` wrote, as environment variables.
fn roles_env(keys: &Path) -> Vec<(String, String)> {
    std::fs::read_to_string(keys.join("roles.env"))
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

struct Site {
    _server: KillOnDrop,
    dir: PathBuf,
    url: String,
}

impl Site {
    /// `snbuf` with `args`, signed in as `role` (None: no key), trusting `ca`.
    fn as_role(&self, role: Option<&str>, ca: &str, args: &[&str]) -> std::process::Output {
        let mut a: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        a.extend(["--nats".into(), self.url.clone(), "--nats-ca".into()]);
        a.push(self.dir.join(ca).to_string_lossy().into_owned());
        if let Some(role) = role {
            a.push("--nats-nkey".into());
            a.push(self.key(role).to_string_lossy().into_owned());
        }
        common::snbuf_owned(&a)
    }

    fn key(&self, role: &str) -> PathBuf {
        self.dir.join("keys").join(format!("{role}.nk"))
    }
}

/// The server of deploy/nats-secure.conf on a free port, with the keys and certificates made
/// in `dir`; None when nats-server or openssl is missing (the test skips or, in CI, fails).
fn site(dir: &Path) -> Option<Site> {
    let bin = common::nats_server_bin()?;
    if Command::new("openssl").arg("version").output().is_err() {
        common::skip_unless_required("SNBUF_REQUIRE_NATS", "openssl is not installed");
        return None;
    }
    certificates(dir);
    let o = snbuf(&["fleet", "keys", dir.join("keys").to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let port = free_port();
    let log = std::fs::File::create(dir.join("nats.log")).unwrap();
    let child = Command::new(bin)
        .arg("-c")
        .arg(repo().join("deploy/nats-secure.conf"))
        .envs(roles_env(&dir.join("keys")))
        .env("SNBUF_NATS_LISTEN", format!("127.0.0.1:{port}"))
        .env("SNBUF_NATS_STORE", dir.join("store"))
        .env("SNBUF_NATS_CERT", dir.join("server.pem"))
        .env("SNBUF_NATS_KEY", dir.join("server-key.pem"))
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let server = KillOnDrop(child);
    common::wait_for_port(
        port,
        "nats-server (its log: nats.log in the test's directory)",
    );
    Some(Site {
        _server: server,
        dir: dir.to_path_buf(),
        url: format!("tls://127.0.0.1:{port}"),
    })
}

/// Waits (at most 30 s) until `dir` holds a verified burst; its manifest.
fn sealed(dir: &Path) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(t) = std::fs::read_to_string(dir.join("manifest.json")) {
            if t.contains("\"verified\"") {
                return serde_json::from_str(&t).unwrap();
            }
        }
        assert!(
            Instant::now() < deadline,
            "{} not sealed in 30 s",
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// What the unit's key may try on the streams themselves, straight through the client library:
/// each answer, or why none came.
fn stream_admin_as(site: &Site, role: &str) -> Vec<Result<(), String>> {
    let seed = std::fs::read_to_string(site.key(role))
        .unwrap()
        .trim()
        .to_string();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    snbuf_fleet::connect::tls_provider();
    rt.block_on(async {
        let opts = async_nats::ConnectOptions::with_nkey(seed)
            .add_root_certificates(site.dir.join("ca.pem"))
            .require_tls(true);
        let c = async_nats::connect_with_options(site.url.as_str(), opts)
            .await
            .unwrap();
        let mut js = async_nats::jetstream::new(c);
        js.set_timeout(Duration::from_secs(2));
        let mut out = Vec::new();
        out.push(
            js.delete_stream("SNBUF_TRIGGERS")
                .await
                .map(|_| ())
                .map_err(|e| e.to_string()),
        );
        let purged = match js.get_stream("SNBUF_EVENTS").await {
            Ok(s) => s.purge().await.map(|_| ()).map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        out.push(purged);
        out
    })
}

#[test]
fn only_the_trigger_role_triggers_and_the_fleet_works_with_roles_and_tls() {
    let root = tempfile::tempdir().unwrap();
    let Some(site) = site(root.path()) else {
        return;
    };
    // The streams are the admin's to make.
    let o = site.as_role(Some("admin"), "ca.pem", &["fleet", "setup"]);
    assert!(o.status.success(), "{}", stderr(&o));

    // A unit signed in as `unit`, over TLS.
    let out = root.path().join("u1");
    let socket = root.path().join("u1.sock");
    let unit_key = site.key("unit");
    let child = Command::new(env!("CARGO_BIN_EXE_snbuf"))
        .args([
            "serve",
            "--unit",
            "u1",
            "--links",
            "2",
            "--rate-per-link",
            "5MB/s",
        ])
        .args([
            "--buffer", "2s", "--pre", "300ms", "--post", "300ms", "--method", "direct",
        ])
        .arg("--output")
        .arg(&out)
        .arg("--socket")
        .arg(&socket)
        .args(["--nats", &site.url, "--nats-ca"])
        .arg(root.path().join("ca.pem"))
        .arg("--nats-nkey")
        .arg(&unit_key)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(root.path().join("u1.log")).unwrap())
        .spawn()
        .unwrap();
    let _unit = KillOnDrop(child);
    wait_for_socket(&socket);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let o = site.as_role(Some("monitor"), "ca.pem", &["fleet", "status", "--json"]);
        if o.status.success() && String::from_utf8_lossy(&o.stdout).contains("\"u1\"") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the unit never reported: {}",
            stderr(&o)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_millis(1000));

    // The trigger role triggers; the unit records; the monitor reads the outcome.
    let o = site.as_role(
        Some("trigger"),
        "ca.pem",
        &["trigger", "--burst-id", "real"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let m = sealed(&out.join("real"));
    assert_eq!(m["state"], "sealed", "{m}");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let o = site.as_role(Some("monitor"), "ca.pem", &["fleet", "events", "--json"]);
        assert!(o.status.success(), "{}", stderr(&o));
        let events: Vec<Value> = serde_json::from_slice(&o.stdout).unwrap();
        if events
            .iter()
            .any(|e| e["trigger_id"] == "real" && e["event"] == "sealed")
        {
            break;
        }
        assert!(Instant::now() < deadline, "no sealed event: {events:?}");
        std::thread::sleep(Duration::from_millis(200));
    }

    // A unit's key, or a monitor's, cannot trigger: refused, said, and nothing recorded.
    for role in ["unit", "monitor"] {
        let id = format!("by-{role}");
        let o = site.as_role(Some(role), "ca.pem", &["trigger", "--burst-id", &id]);
        assert_eq!(o.status.code(), Some(1), "{role}: {}", stderr(&o));
        let err = stderr(&o);
        assert!(err.contains("Permissions Violation"), "{role}: {err}");
        assert!(!err.contains("Send it again"), "{role}: {err}");
        std::thread::sleep(Duration::from_millis(1500));
        assert!(!out.join(&id).exists(), "{role} triggered a burst");
    }
    // Nor make the streams go away.
    for (what, r) in ["delete", "purge"]
        .iter()
        .zip(stream_admin_as(&site, "unit"))
    {
        assert!(r.is_err(), "a unit's key could {what} a stream");
    }
    let o = site.as_role(Some("admin"), "ca.pem", &["fleet", "setup"]);
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("SNBUF_TRIGGERS: as wanted"),
        "the trigger stream is still there: {}",
        String::from_utf8_lossy(&o.stdout)
    );

    // No key, a key the server does not list, a wrong CA: refused at once, no secret shown.
    let stranger = root.path().join("stranger");
    let o = snbuf(&["fleet", "keys", stranger.to_str().unwrap()]);
    assert!(o.status.success());
    std::fs::copy(
        stranger.join("trigger.nk"),
        site.dir.join("keys/stranger.nk"),
    )
    .unwrap();
    for (role, ca, needle) in [
        (None, "ca.pem", "refused these credentials"),
        (Some("stranger"), "ca.pem", "refused these credentials"),
        (
            Some("trigger"),
            "other-ca.pem",
            "certificate is not one the CA given trusts",
        ),
    ] {
        let o = site.as_role(role, ca, &["trigger", "--burst-id", "refused"]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{role:?} {ca}: {err}");
        assert!(err.contains(needle), "{role:?} {ca}: {err}");
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        // Refused at once: not tried again until the command's deadline, as a server that
        // does not answer is.
        assert!(
            !err.contains("no answer within") && !err.contains("attempt(s)"),
            "{role:?} {ca}: {err}"
        );
        for seed in ["admin", "unit", "trigger", "monitor", "stranger"] {
            let s = std::fs::read_to_string(site.key(seed)).unwrap();
            assert!(!err.contains(s.trim()), "a seed was printed: {err}");
        }
    }
    assert!(!out.join("refused").exists());
}
