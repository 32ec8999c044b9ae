//! The fleet options `serve`, `trigger` and `fleet` share: NATS servers, credentials and
//! replicas, and the unit id.

use snbuf_fleet::schema::check_unit_id;
use snbuf_fleet::NatsOptions;

use crate::cli::NatsArgs;
use crate::exit::usage;

/// The fleet's NATS options: `servers` is one URL or several, comma separated.
pub fn nats_options(servers: &str, auth: &NatsArgs) -> anyhow::Result<NatsOptions> {
    for (flag, f) in [
        ("--nats-creds", &auth.nats_creds),
        ("--nats-nkey", &auth.nats_nkey),
        ("--nats-ca", &auth.nats_ca),
    ] {
        if let Some(f) = f {
            if !f.is_file() {
                return Err(usage(format!("{flag} {}: no such file", f.display())));
            }
        }
    }
    let mut opts = NatsOptions::parse(servers).map_err(|e| usage(format!("--nats {e}")))?;
    if auth.nats_creds.is_some() && auth.nats_nkey.is_some() {
        return Err(usage(
            "--nats-creds and --nats-nkey: give one way to sign in",
        ));
    }
    if let Some(k) = &auth.nats_nkey {
        snbuf_fleet::connect::read_nkey_seed(k).map_err(|e| usage(format!("--nats-nkey: {e}")))?;
    }
    opts.creds = auth.nats_creds.clone();
    opts.nkey = auth.nats_nkey.clone();
    opts.ca = auth.nats_ca.clone();
    opts.replicas = auth.nats_replicas.map(|r| r as usize);
    Ok(opts)
}

/// The unit id: as given, or made from the host name (whatever it is: a machine without one,
/// or a busybox initramfs, says "(none)").
pub fn unit_id(given: Option<&str>) -> anyhow::Result<String> {
    let id = match given {
        Some(id) => id.to_string(),
        None => snbuf_fleet::schema::unit_id_from_hostname(
            &std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default(),
        ),
    };
    check_unit_id(&id).map_err(|e| usage(format!("--unit: {e}")))?;
    Ok(id)
}
