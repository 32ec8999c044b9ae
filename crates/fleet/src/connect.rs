//! How to reach the fleet's NATS cluster: its servers (one URL or several, comma separated, as
//! NATS clients take them), credentials and TLS, the replica count its streams should have, and
//! one connection with the timeouts every caller needs (a dead or paused server is left within
//! seconds for another, never waited on).

use std::path::PathBuf;
use std::time::Duration;

use async_nats::ServerAddr;

/// Where a unit or the operator looks for NATS when told only to use it: a server on this
/// host, at NATS's own port.
pub const DEFAULT_NATS_URL: &str = "nats://127.0.0.1:4222";

/// How long one server may take to accept a connection before the next is tried.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How often a connected client pings its server. Two unanswered pings end the connection: a
/// paused (SIGSTOP) or cut-off server is left for another within ~3 pings, where the client
/// library's default of 60 s would hold triggers for minutes.
pub const PING_INTERVAL: Duration = Duration::from_secs(1);
/// How long a connect waits for one server before it also tries the next (`connect`).
pub const RACE_STAGGER: Duration = Duration::from_millis(150);
/// The longest a lost connection waits between reconnect attempts. The client library's default
/// backs off to 4 s: a unit whose servers are back would stay deaf that long, where its promise
/// is at most 1 s. A handful of units trying four times a second costs a server nothing.
pub const RECONNECT_DELAY_MAX: Duration = Duration::from_millis(250);
/// Between two tries of something that failed on a server (a connect, a subscription, a consumer
/// session): short for the same reason.
pub const RETRY_DELAY: Duration = Duration::from_millis(200);

/// The wait before reconnect attempt `attempts` (the first at once, then 100 ms more each time,
/// never more than `RECONNECT_DELAY_MAX`), less up to a fifth at random: a fleet whose servers
/// come back does not knock all at once.
pub fn reconnect_delay(attempts: usize) -> Duration {
    let d = (Duration::from_millis(100) * attempts.saturating_sub(1).min(100) as u32)
        .min(RECONNECT_DELAY_MAX);
    let jitter_permille = (snbuf_quantity::now_unix_ns() / 1000 % 200) as u32;
    d - d * jitter_permille / 1000
}

/// `url` with the user info of `scheme://user:password@host` cut to `user:***`.
pub fn without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    match rest.rsplit_once('@') {
        Some((user, host)) => {
            let name = user.split(':').next().unwrap_or("");
            format!("{scheme}://{name}:***@{host}")
        }
        None => url.to_string(),
    }
}

/// How a connect error that no retry changes begins.
pub const REFUSED: &str = "refused: ";

/// Why a server refused a client for good, from the client library's error, if it did: its
/// credentials (none, wrong, or not listed) or its certificate (not signed by the CA trusted).
pub fn refusal(error: &str) -> Option<&'static str> {
    let e = error.to_ascii_lowercase();
    if e.contains("authorization violation") {
        Some("the server refused these credentials (--nats-nkey or --nats-creds: none, wrong, or not one it lists)")
    } else if e.contains("invalid peer certificate") {
        Some("TLS: the server's certificate is not one the CA given trusts (--nats-ca)")
    } else {
        None
    }
}

/// The user NKey seed in `path` (one line, `SU...`), checked; an error never shows the seed.
pub fn read_nkey_seed(path: &std::path::Path) -> std::io::Result<String> {
    let text = std::fs::read_to_string(path)?;
    let seed = text.trim().to_string();
    if !seed.starts_with("SU") || nkeys::KeyPair::from_seed(&seed).is_err() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "{}: not a user NKey seed (one line starting SU, as `snbuf fleet keys` writes)",
                path.display()
            ),
        ));
    }
    Ok(seed)
}

/// How to reach NATS.
#[derive(Clone, Debug)]
pub struct NatsOptions {
    /// The cluster's servers as given (`nats://h1:4222,nats://h2:4222`): a client connects to one
    /// of them and moves to another when it fails. At least one.
    pub servers: Vec<String>,
    /// A `.creds` file (JWT and NKey), for servers with decentralised auth.
    pub creds: Option<PathBuf>,
    /// A file holding a user's NKey seed (`SU...`), for servers that list their users' public
    /// keys (deploy/nats-secure.conf): the role this client plays.
    pub nkey: Option<PathBuf>,
    /// A CA certificate to trust for TLS (`tls://` URLs, or servers that require TLS).
    pub ca: Option<PathBuf>,
    /// Replicas of the fleet's streams when this client creates them; None: 3 when the cluster
    /// has at least 3 servers, else 1 (`replicas_for`).
    pub replicas: Option<usize>,
    /// The last permissions violation a server reported to this client's connections (what
    /// its role may not do): said instead of the timeout the refused request ends in.
    pub(crate) denied: std::sync::Arc<std::sync::Mutex<Option<String>>>,
}

/// Makes ring the process's TLS crypto provider, once, before a connection is made. rustls takes
/// its provider from its compiled features; with both aws-lc-rs (the S3 client's, which names its
/// own) and ring (NATS's) compiled in, it cannot choose, and panicked at the first TLS connection.
/// A provider another part of the process installed first is kept.
pub fn tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    debug_assert!(
        rustls::crypto::CryptoProvider::get_default().is_some(),
        "a TLS crypto provider for the process"
    );
}

impl NatsOptions {
    /// Options for the servers in `list` (comma separated), each a nats://, tls://, ws:// or
    /// wss:// URL; an error names the entry that is not one.
    pub fn parse(list: &str) -> Result<NatsOptions, String> {
        let mut servers = Vec::new();
        for url in list.split(',').map(str::trim) {
            if url.is_empty() {
                return Err(format!("'{list}': an empty server in the list"));
            }
            if !["nats://", "tls://", "ws://", "wss://"]
                .iter()
                .any(|s| url.starts_with(s))
            {
                return Err(format!(
                    "{url}: expected a URL such as nats://127.0.0.1:4222"
                ));
            }
            url.parse::<ServerAddr>()
                .map_err(|e| format!("{url}: not a server address ({e})"))?;
            if !servers.iter().any(|s| s == url) {
                servers.push(url.to_string());
            }
        }
        Ok(NatsOptions {
            servers,
            creds: None,
            nkey: None,
            denied: Default::default(),
            ca: None,
            replicas: None,
        })
    }

    /// The servers as the user gave them, for messages, without any password a URL holds.
    pub fn describe(&self) -> String {
        self.servers
            .iter()
            .map(|s| without_password(s))
            .collect::<Vec<_>>()
            .join(",")
    }

    pub(crate) fn addrs(&self) -> Vec<ServerAddr> {
        self.servers
            .iter()
            .map(|s| s.parse().expect("checked by NatsOptions::parse"))
            .collect()
    }

    pub(crate) async fn connect_options(&self) -> std::io::Result<async_nats::ConnectOptions> {
        tls_provider();
        let mut o = match (&self.creds, &self.nkey) {
            (Some(c), _) => async_nats::ConnectOptions::with_credentials_file(c).await?,
            (None, Some(k)) => async_nats::ConnectOptions::with_nkey(read_nkey_seed(k)?),
            (None, None) => async_nats::ConnectOptions::new(),
        };
        if let Some(ca) = &self.ca {
            o = o.add_root_certificates(ca.clone()).require_tls(true);
        }
        Ok(o.connection_timeout(CONNECT_TIMEOUT)
            .ping_interval(PING_INTERVAL)
            .reconnect_delay_callback(reconnect_delay))
    }

    /// One connection to one of the servers. They are tried in a staggered race, from a different
    /// first server each call: the next is tried `RACE_STAGGER` after the one before it, each for
    /// at most `CONNECT_TIMEOUT` (the whole handshake), and the first to answer is kept. A paused
    /// or cut-off server, whose TCP connect may succeed and whose handshake never answers, so
    /// costs a caller `RACE_STAGGER`, not the whole timeout. The client library moves the
    /// connection to another server when that one fails.
    pub(crate) async fn connect(&self) -> Result<async_nats::Client, String> {
        self.connect_notifying(None).await
    }

    /// `connect`, and `connected` is notified each time the connection is (re)established: a
    /// caller that keeps one connection for a long run learns when it came back.
    pub(crate) async fn connect_notifying(
        &self,
        connected: Option<std::sync::Arc<tokio::sync::Notify>>,
    ) -> Result<async_nats::Client, String> {
        let addrs = self.addrs();
        let first = (snbuf_quantity::now_unix_ns() / 1000) as usize % addrs.len();
        let mut tries = futures::stream::FuturesUnordered::new();
        for i in 0..addrs.len() {
            let server = addrs[(first + i) % addrs.len()].clone();
            let connected = connected.clone();
            tries.push(async move {
                tokio::time::sleep(RACE_STAGGER * i as u32).await;
                let one = self.connect_one(server.clone(), connected, false);
                match tokio::time::timeout(CONNECT_TIMEOUT, one).await {
                    Ok(Ok(client)) => Ok(client),
                    Ok(Err(e)) => Err(format!("{}: {e}", server_name(&server))),
                    Err(_) => Err(format!(
                        "{}: no answer within {} s",
                        server_name(&server),
                        CONNECT_TIMEOUT.as_secs()
                    )),
                }
            });
        }
        let mut failures = Vec::new();
        while let Some(tried) = futures::StreamExt::next(&mut tries).await {
            match tried {
                // The others are dropped, connections and all.
                Ok(client) => return Ok(client),
                Err(e) => failures.push(e),
            }
        }
        // Refused for good (credentials, certificate): said as such, and not tried again.
        if let Some(why) = failures.iter().find_map(|f| refusal(f)) {
            return Err(format!("{REFUSED}{why} ({})", failures.join("; ")));
        }
        Err(format!(
            "cannot connect ({}); is nats-server running with -js?",
            failures.join("; ")
        ))
    }

    /// The permissions violation a server last reported to this client, if any.
    pub fn denied(&self) -> Option<String> {
        self.denied.lock().expect("denied").clone()
    }

    /// A connection to `server` (one of `servers`), unbounded in time: callers bound it. With
    /// `only`, the client library reconnects to that server only, never to one it hears of.
    pub(crate) async fn connect_one(
        &self,
        server: ServerAddr,
        connected: Option<std::sync::Arc<tokio::sync::Notify>>,
        only: bool,
    ) -> Result<async_nats::Client, String> {
        let mut o = self
            .connect_options()
            .await
            .map_err(|e| e.to_string())?
            .retain_servers_order();
        if only {
            o = o.ignore_discovered_servers();
        }
        let denied = self.denied.clone();
        o = o.event_callback(move |event| {
            let (n, denied) = (connected.clone(), denied.clone());
            async move {
                match event {
                    async_nats::Event::Connected => {
                        if let Some(n) = n {
                            n.notify_one();
                        }
                    }
                    async_nats::Event::ServerError(async_nats::ServerError::Other(why))
                        if why.to_ascii_lowercase().contains("permissions violation") =>
                    {
                        *denied.lock().expect("denied") = Some(why);
                    }
                    _ => {}
                }
            }
        });
        async_nats::connect_with_options(vec![server], o)
            .await
            .map_err(|e| e.to_string())
    }

    /// The replica count for the fleet's streams: as asked, else 3 when the cluster has at least
    /// 3 servers (those given, and those the connected server advertises), else 1.
    pub fn replicas_for(&self, client: &async_nats::Client) -> usize {
        if let Some(r) = self.replicas {
            return r;
        }
        if cluster_size(&self.servers, &client.server_info().connect_urls) >= 3 {
            3
        } else {
            1
        }
    }
}

pub(crate) fn server_name(a: &ServerAddr) -> String {
    format!("{}:{}", a.host(), a.port())
}

/// The servers of a cluster as far as a client can tell: the URLs it was given and the client
/// URLs its server advertises (`connect_urls`, which lists every server of a cluster, itself
/// included, that is up), counted once each by host and port.
pub fn cluster_size(given: &[String], advertised: &[String]) -> usize {
    let host_port = |u: &str| {
        u.rsplit("://")
            .next()
            .unwrap_or(u)
            .trim_end_matches('/')
            .to_string()
    };
    let mut all: Vec<String> = given.iter().map(|u| host_port(u)).collect();
    all.extend(advertised.iter().map(|u| host_port(u)));
    all.sort();
    all.dedup();
    all.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_of_servers_parses_and_a_bad_entry_is_named() {
        let o = NatsOptions::parse("nats://a:4222, nats://b:4223,nats://a:4222").unwrap();
        assert_eq!(o.servers, ["nats://a:4222", "nats://b:4223"]);
        assert_eq!(o.describe(), "nats://a:4222,nats://b:4223");
        assert_eq!(o.addrs().len(), 2);
        let e = NatsOptions::parse("nats://a:4222,http://b").unwrap_err();
        assert!(e.starts_with("http://b:"), "{e}");
        assert!(NatsOptions::parse("nats://a:4222,").is_err());
        assert!(NatsOptions::parse("").is_err());
    }

    #[test]
    fn a_lost_connection_is_tried_again_within_a_quarter_second() {
        assert_eq!(reconnect_delay(0), Duration::ZERO);
        assert_eq!(reconnect_delay(1), Duration::ZERO);
        assert!((80..=100).contains(&reconnect_delay(2).as_millis()));
        assert!(reconnect_delay(usize::MAX) >= RECONNECT_DELAY_MAX * 4 / 5);
        assert!((0..1000).all(|n| reconnect_delay(n) <= RECONNECT_DELAY_MAX));
    }

    #[test]
    fn the_cluster_counts_given_and_advertised_servers_once() {
        let given = ["nats://127.0.0.1:4222".to_string()];
        let advertised = ["127.0.0.1:4222", "127.0.0.1:4223", "127.0.0.1:4224"].map(String::from);
        assert_eq!(cluster_size(&given, &advertised), 3);
        assert_eq!(cluster_size(&given, &[]), 1);
        // One server of three down: the three URLs given still say it is a cluster of three.
        let given3 = [
            "nats://127.0.0.1:4222",
            "nats://127.0.0.1:4223",
            "nats://127.0.0.1:4224",
        ]
        .map(String::from);
        assert_eq!(cluster_size(&given3, &advertised[..2]), 3);
    }
}
