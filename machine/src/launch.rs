//! What a launcher tells a node it starts: the launch context a launched layer boots from.
//!
//! charmrun puts it in each node's environment ([`LaunchEnv::from_env`]); a launcher that runs
//! in the program's own process (a tree-overlay front-end, the in-process conformance check)
//! hands it over in [`BootConfig::launch`](crate::BootConfig::launch) instead, so that no
//! process-global state and no environment variable of the process changes (which is not
//! thread-safe). A launched layer's boot takes it with [`LaunchEnv::for_boot`].

use crate::contract::BootConfig;
use crate::error::MachineError;

/// Environment variable: the launcher's control address (`host:port`).
pub const ENV_CHARMRUN: &str = "CONVERSE_CHARMRUN";
/// Environment variable: the job secret, hex.
pub const ENV_SECRET: &str = "CONVERSE_SECRET";
/// Environment variable: this process's node number.
pub const ENV_NODE: &str = "CONVERSE_NODE";
/// Environment variable: number of nodes in the job.
pub const ENV_NODES: &str = "CONVERSE_NODES";
/// Environment variable: the job's tag (see [`LaunchEnv::shm_path`]).
pub const ENV_JOB: &str = "CONVERSE_JOB";

/// Bytes in a job secret.
pub const SECRET_LEN: usize = 16;

/// What the launcher told a node.
#[derive(Clone)]
pub struct LaunchEnv {
    /// The launcher's control address.
    pub charmrun: String,
    /// The job secret.
    pub secret: [u8; SECRET_LEN],
    /// This node's number.
    pub node: usize,
    /// Nodes in the job.
    pub num_nodes: usize,
    /// The job's tag.
    pub job: String,
    /// The launcher runs in this very process: once this node has said it leaves, the end of
    /// the job must not end the process.
    pub embedded: bool,
}

// By hand: the secret must never reach a log.
impl std::fmt::Debug for LaunchEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LaunchEnv")
            .field("charmrun", &self.charmrun)
            .field("node", &self.node)
            .field("num_nodes", &self.num_nodes)
            .field("job", &self.job)
            .field("embedded", &self.embedded)
            .finish_non_exhaustive()
    }
}

impl LaunchEnv {
    /// The launch context a launched layer boots from: the one the runtime was given, else
    /// the process environment.
    ///
    /// # Errors
    /// As [`from_env`](Self::from_env).
    pub fn for_boot(cfg: &BootConfig) -> Result<LaunchEnv, MachineError> {
        match &cfg.launch {
            Some(env) => Ok(env.clone()),
            None => LaunchEnv::from_env(),
        }
    }

    /// Whether this process's environment says a launcher started it.
    pub fn present() -> bool {
        std::env::var_os(ENV_CHARMRUN).is_some()
    }

    /// A path in /dev/shm for a file of this job named `name`: the launcher removes it when
    /// the job ends, however it ends (a layer should still remove it as soon as it can).
    pub fn shm_path(&self, name: &str) -> String {
        format!("/dev/shm/{}{name}", shm_prefix(&self.job))
    }

    /// Read the environment the launcher set.
    ///
    /// # Errors
    /// [`MachineError::Boot`] when a variable is missing or malformed.
    pub fn from_env() -> Result<LaunchEnv, MachineError> {
        let var = |k: &str| {
            std::env::var(k).map_err(|_| {
                MachineError::Boot(format!(
                    "{k} is not set: start this program with charmrun (charmrun +p N PROGRAM)"
                ))
            })
        };
        let num = |k: &str| -> Result<usize, MachineError> {
            let v = var(k)?;
            v.parse()
                .map_err(|_| MachineError::Boot(format!("{k}='{v}' is not a number")))
        };
        let secret = secret_from_hex(&var(ENV_SECRET)?)
            .ok_or_else(|| MachineError::Boot(format!("{ENV_SECRET} is malformed")))?;
        let env = LaunchEnv {
            charmrun: var(ENV_CHARMRUN)?,
            secret,
            node: num(ENV_NODE)?,
            num_nodes: num(ENV_NODES)?,
            job: var(ENV_JOB)?,
            embedded: false,
        };
        if !env.job.bytes().all(|b| b.is_ascii_hexdigit()) || env.job.is_empty() {
            return Err(MachineError::Boot(format!("{ENV_JOB} is malformed")));
        }
        if env.num_nodes == 0 || env.node >= env.num_nodes {
            return Err(MachineError::Boot(format!(
                "node {} of {} makes no sense",
                env.node, env.num_nodes
            )));
        }
        Ok(env)
    }
}

/// The prefix of the files in /dev/shm that belong to the job tagged `tag`: the launcher
/// removes whatever still carries it when the job ends, however it ends.
pub fn shm_prefix(tag: &str) -> String {
    format!("converse-{tag}-")
}

/// A secret from its hex form (as it travels in [`ENV_SECRET`]).
pub fn secret_from_hex(h: &str) -> Option<[u8; SECRET_LEN]> {
    if h.len() != 2 * SECRET_LEN || !h.is_ascii() {
        return None;
    }
    let mut s = [0u8; SECRET_LEN];
    for (i, b) in s.iter_mut().enumerate() {
        *b = u8::from_str_radix(&h[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_round_trip_through_hex_and_junk_is_refused() {
        let s: [u8; SECRET_LEN] = std::array::from_fn(|i| (i * 17) as u8);
        let h: String = s.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(secret_from_hex(&h), Some(s));
        assert_eq!(secret_from_hex(&h[1..]), None);
        assert_eq!(secret_from_hex(&"zz".repeat(SECRET_LEN)), None);
        assert_eq!(secret_from_hex(&"é".repeat(SECRET_LEN)), None);
    }

    #[test]
    fn debug_never_shows_the_secret() {
        let env = LaunchEnv {
            charmrun: "h:1".into(),
            secret: [0xab; SECRET_LEN],
            node: 0,
            num_nodes: 1,
            job: "00".into(),
            embedded: false,
        };
        assert!(!format!("{env:?}").contains("171"));
    }
}
