//! A real NATS cluster for tests: three `nats-server` processes on 127.0.0.1, each started from
//! `deploy/nats-cluster.conf` (the configuration docs/FLEET.md gives operators) with its own
//! ports and store directory, and the faults a nemesis needs: kill (SIGKILL), restart, pause
//! (SIGSTOP) and resume (SIGCONT) one server, and wait until the cluster has healed.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{free_port, KillOnDrop};

pub struct Server {
    pub name: String,
    /// The address it listens on, and the network namespace it runs in (a `TestNet` host), if
    /// not this one.
    pub host: String,
    pub netns: Option<String>,
    pub client_port: u16,
    route_port: u16,
    store: PathBuf,
    log: PathBuf,
    proc: Option<KillOnDrop>,
    paused: bool,
}

pub struct Cluster {
    bin: PathBuf,
    config: PathBuf,
    pub servers: Vec<Server>,
}

/// The configuration every server of the cluster runs.
pub fn config_file() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/nats-cluster.conf")
}

/// deploy/'s configuration as server `bin` takes it, written in `dir`: as it is, or for a server
/// before 2.10 (Debian's 2.9.10) without `sync_interval`, which it does not know.
fn config_for(bin: &Path, dir: &Path) -> PathBuf {
    let version = super::version_of(bin);
    if !version.contains("v2.9.") {
        return config_file();
    }
    let text = std::fs::read_to_string(config_file()).unwrap();
    let kept: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("sync_interval"))
        .collect();
    let path = dir.join("nats-cluster-2.9.conf");
    std::fs::write(&path, kept.join("\n")).unwrap();
    path
}

impl Cluster {
    /// `n` servers in `dir`, started and with a JetStream metadata leader; None (the test skips)
    /// when nats-server is not installed and SNBUF_REQUIRE_NATS is not set.
    pub fn start(n: usize, dir: &Path) -> Option<Cluster> {
        let hosts: Vec<(String, Option<String>)> =
            (0..n).map(|_| ("127.0.0.1".to_string(), None)).collect();
        Cluster::start_on(&hosts, dir)
    }

    /// A server on each of `hosts` (address, and the network namespace to run in, if any): on
    /// hosts of their own each listens on the standard ports; on 127.0.0.1, on free ones.
    pub fn start_on(hosts: &[(String, Option<String>)], dir: &Path) -> Option<Cluster> {
        let bin = super::nats_server_bin()?;
        let servers = (1..=hosts.len())
            .map(|i| Server {
                name: format!("n{i}"),
                host: hosts[i - 1].0.clone(),
                netns: hosts[i - 1].1.clone(),
                client_port: if hosts[i - 1].1.is_some() {
                    4222
                } else {
                    free_port()
                },
                route_port: if hosts[i - 1].1.is_some() {
                    6222
                } else {
                    free_port()
                },
                store: dir.join(format!("n{i}-store")),
                log: dir.join(format!("n{i}.log")),
                proc: None,
                paused: false,
            })
            .collect();
        let config = config_for(&bin, dir);
        let mut c = Cluster {
            bin,
            config,
            servers,
        };
        for i in 0..hosts.len() {
            c.restart(i);
        }
        c.wait_healthy(Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("the cluster never formed: {e}"));
        Some(c)
    }

    /// What `nats-server --version` says ("nats-server: v2.15.1").
    pub fn version(&self) -> String {
        super::version_of(&self.bin)
    }

    /// Every server's client URL, comma separated, as `--nats` takes them.
    pub fn urls(&self) -> String {
        self.servers
            .iter()
            .map(|s| format!("nats://{}:{}", s.host, s.client_port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Starts server `i` (again), with the store it had; returns once it accepts clients.
    pub fn restart(&mut self, i: usize) {
        let routes: Vec<String> = self
            .servers
            .iter()
            .map(|s| format!("nats-route://{}:{}", s.host, s.route_port))
            .collect();
        let s = &mut self.servers[i];
        assert!(s.proc.is_none(), "{} is already running", s.name);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&s.log)
            .unwrap();
        let mut cmd = match &s.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(&self.bin);
                c
            }
            None => Command::new(&self.bin),
        };
        cmd.arg("-c")
            .arg(&self.config)
            .env("SNBUF_NATS_NAME", &s.name)
            .env("SNBUF_NATS_LISTEN", format!("{}:{}", s.host, s.client_port))
            .env("SNBUF_NATS_STORE", &s.store)
            .env(
                "SNBUF_NATS_CLUSTER_LISTEN",
                format!("{}:{}", s.host, s.route_port),
            );
        for (k, r) in routes.iter().enumerate() {
            cmd.env(format!("SNBUF_NATS_ROUTE{}", k + 1), r);
        }
        let child = cmd
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start nats-server");
        s.proc = Some(KillOnDrop(child));
        s.paused = false;
        let deadline = Instant::now() + Duration::from_secs(10);
        let addr: std::net::SocketAddr = format!("{}:{}", s.host, s.client_port).parse().unwrap();
        while std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_err() {
            assert!(Instant::now() < deadline, "{} did not start", s.name);
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILL to server `i`: gone at once, its store as the kill left it.
    pub fn kill(&mut self, i: usize) {
        let s = &mut self.servers[i];
        drop(s.proc.take().expect("running"));
        s.paused = false;
    }

    /// SIGSTOP to server `i`: its sockets stay open and say nothing, as a partitioned server
    /// looks to its clients and peers.
    pub fn pause(&mut self, i: usize) {
        self.signal(i, "STOP");
        self.servers[i].paused = true;
    }

    pub fn resume(&mut self, i: usize) {
        self.signal(i, "CONT");
        self.servers[i].paused = false;
    }

    fn signal(&self, i: usize, sig: &str) {
        let pid = self.servers[i].proc.as_ref().expect("running").0.id();
        let ok = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(pid.to_string())
            .status()
            .expect("kill")
            .success();
        assert!(ok, "kill -{sig} {pid}");
    }

    /// Waits until every server is up and every stream of the fleet that exists has a leader
    /// and all its replicas current: the cluster has healed from the last fault. Err says what
    /// was still wrong at the deadline.
    pub fn wait_healthy(&self, deadline: Duration) -> Result<Duration, String> {
        let start = Instant::now();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut last = String::new();
        while start.elapsed() < deadline {
            let checked = rt.block_on(async {
                tokio::time::timeout(Duration::from_secs(5), self.health()).await
            });
            match checked {
                Ok(Ok(())) => return Ok(start.elapsed()),
                Ok(Err(e)) => last = e,
                Err(_) => last = "a health check got no answer in 5 s".into(),
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        Err(last)
    }

    async fn health(&self) -> Result<(), String> {
        use async_nats::jetstream;
        for s in &self.servers {
            if s.proc.is_none() || s.paused {
                return Err(format!("{} is down", s.name));
            }
            let c = async_nats::ConnectOptions::new()
                .connection_timeout(Duration::from_secs(2))
                .connect(format!("nats://{}:{}", s.host, s.client_port))
                .await
                .map_err(|e| format!("{}: {e}", s.name))?;
            let js = jetstream::new(c);
            // Each stream answers, or JetStream answers that it does not exist yet (which
            // takes a metadata leader): anything else is a cluster still healing.
            for stream in ["SNBUF_TRIGGERS", "SNBUF_EVENTS", "SNBUF_UNITS"] {
                let mut st = match js.get_stream(stream).await {
                    Ok(st) => st,
                    Err(e) if e.to_string().contains("error code 10059") => continue,
                    Err(e) => return Err(format!("{}: {stream}: {e}", s.name)),
                };
                let info = st.info().await.map_err(|e| format!("{stream}: {e}"))?;
                let cluster = info
                    .cluster
                    .as_ref()
                    .ok_or(format!("{stream}: no cluster"))?;
                if cluster.leader.is_none() {
                    return Err(format!("{stream} has no leader"));
                }
                if let Some(r) = cluster.replicas.iter().find(|r| !r.current || r.offline) {
                    return Err(format!("{stream}: replica {} is not current", r.name));
                }
            }
        }
        Ok(())
    }
}
