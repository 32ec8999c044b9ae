//! Who may do what on the fleet's NATS cluster: four roles, each a user NKey that
//! deploy/nats-secure.conf grants its permissions to by its public key. `unit` takes triggers
//! and publishes its status and events, nothing else (it cannot trigger, nor delete or purge a
//! stream); `trigger` sends triggers and reads what became of them; `monitor` only reads;
//! `admin` makes and changes the streams (`snbuf fleet setup`).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The roles, in the order `keys` writes them.
pub const ROLES: [&str; 4] = ["admin", "unit", "trigger", "monitor"];

/// What `keys` wrote: each role's seed file, and the file of public keys for the servers.
pub struct Keys {
    pub seeds: Vec<PathBuf>,
    pub public_env: PathBuf,
}

/// A new user NKey per role in `dir` (created; mode 0700): `ROLE.nk` holds the seed (mode 0600,
/// the client's secret, given with `--nats-nkey`), and `roles.env` the public keys as the
/// servers' configuration reads them (`SNBUF_NKEY_UNIT=U...`). Existing files are never
/// replaced: a unit keeps the identity the servers know.
pub fn keys(dir: &Path) -> std::io::Result<Keys> {
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
    let mut seeds = Vec::new();
    let mut env = String::new();
    for role in ROLES {
        let path = dir.join(format!("{role}.nk"));
        let pair = nkeys::KeyPair::new_user();
        let seed = pair
            .seed()
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| named(&path, e))?;
        writeln!(f, "{seed}")?;
        f.sync_all()?;
        env += &format!("SNBUF_NKEY_{}={}\n", role.to_uppercase(), pair.public_key());
        seeds.push(path);
    }
    let public_env = dir.join("roles.env");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&public_env)
        .map_err(|e| named(&public_env, e))?;
    f.write_all(env.as_bytes())?;
    f.sync_all()?;
    Ok(Keys { seeds, public_env })
}

/// `e`, naming `path` (an existing key is never replaced: the error says which).
fn named(path: &Path, e: std::io::Error) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}
