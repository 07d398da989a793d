//! Hosts made of network namespaces: each has its own interface and address (10.98.0.1, .2,
//! ...) on a bridge, and its own host name when reached through [`Hosts::shell`], a
//! remote-shell command that runs `ip netns exec HOST ...` as ssh would run a command on a
//! host. Needs root; without it (or without iproute2) [`Hosts::new`] says why and gives
//! `None`. Everything is removed when the `Hosts` is dropped.

use crate::{charmrun_path, ip, run_bounded, Outcome};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// A set of namespace hosts; host 0 is where charmrun runs.
#[derive(Debug)]
pub struct Hosts {
    prefix: String,
    /// A directory for the test's files (removed at the end).
    pub dir: PathBuf,
    n: usize,
}

impl Hosts {
    /// Build `n` hosts named after `tag` (unique per test), or `None` after saying why this
    /// machine cannot.
    ///
    /// # Panics
    /// When namespaces can be made but the network between them cannot.
    pub fn new(tag: &str, n: usize) -> Option<Hosts> {
        if !nix::unistd::geteuid().is_root() {
            converse::input::error_line("skipped: creating network namespaces needs root");
            return None;
        }
        let prefix = format!("cw{}{tag}", std::process::id() % 100_000);
        let dir = std::env::temp_dir().join(format!("{prefix}-netns"));
        let hosts = Hosts { prefix, dir, n: 0 };
        let sw = hosts.ns("sw");
        if !ip(&["netns", "add", &sw]) {
            converse::input::error_line(
                "skipped: `ip netns add` failed (no iproute2 or no permission)",
            );
            return None;
        }
        let mut hosts = hosts;
        let ok = ip(&["-n", &sw, "link", "add", "br0", "type", "bridge"])
            && ip(&["-n", &sw, "link", "set", "br0", "up"])
            && (0..n).all(|h| {
                hosts.n = h + 1;
                hosts.add_host(h)
            });
        assert!(
            ok,
            "could not build the test network in namespaces {}*",
            hosts.prefix
        );
        std::fs::create_dir_all(&hosts.dir).expect("temp dir");
        Some(hosts)
    }

    fn ns(&self, name: &str) -> String {
        format!("{}-{name}", self.prefix)
    }

    /// Host `h`'s namespace, which is also its host name.
    pub fn host_ns(&self, h: usize) -> String {
        self.ns(&format!("h{h}"))
    }

    /// Host `h`'s address.
    pub fn addr(h: usize) -> String {
        format!("10.98.0.{}", h + 1)
    }

    fn add_host(&self, h: usize) -> bool {
        let (ns, sw) = (self.host_ns(h), self.ns("sw"));
        let (inner, outer) = (
            format!("{}e{h}", self.prefix),
            format!("{}p{h}", self.prefix),
        );
        ip(&["netns", "add", &ns])
            && ip(&[
                "link", "add", &inner, "type", "veth", "peer", "name", &outer,
            ])
            && ip(&["link", "set", &inner, "netns", &ns])
            && ip(&["link", "set", &outer, "netns", &sw])
            && ip(&["-n", &sw, "link", "set", &outer, "master", "br0"])
            && ip(&["-n", &sw, "link", "set", &outer, "up"])
            && ip(&[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{}/24", Self::addr(h)),
                "dev",
                &inner,
            ])
            && ip(&["-n", &ns, "link", "set", &inner, "up"])
            && ip(&["-n", &ns, "link", "set", "lo", "up"])
    }

    /// A remote-shell command: `SHELL HOST COMMAND` runs COMMAND in HOST's namespace, with
    /// the namespace's name as host name; an unknown host fails as ssh does (code 255, a
    /// line on stderr). Each call is logged in `shell-args.log` in [`Hosts::dir`].
    pub fn shell(&self) -> PathBuf {
        let path = self.dir.join("netns-shell");
        let log = self.dir.join("shell-args.log");
        let mut script = format!(
            "#!/bin/sh\necho \"$*\" >> {}\nhost=\"$1\"; shift\ncase \"$host\" in\n",
            log.display()
        );
        for h in 0..self.n {
            script.push_str(&format!("  {}) ns={} ;;\n", Self::addr(h), self.host_ns(h)));
        }
        script.push_str("  *) echo \"netns-shell: ssh: connect to host $host: No route to host\" >&2; exit 255 ;;\nesac\nexec ip netns exec \"$ns\" unshare --uts sh -c \"hostname $ns && $1\"\n");
        std::fs::write(&path, script).expect("write shell");
        let _ = Command::new("chmod").arg("+x").arg(&path).status();
        path
    }

    /// Write `text` to a file of the test's directory.
    pub fn file(&self, name: &str, text: &str) -> PathBuf {
        let p = self.dir.join(name);
        std::fs::write(&p, text).expect("write file");
        p
    }

    /// A machine file naming hosts `from..to`.
    pub fn machines(&self, name: &str, hosts: std::ops::Range<usize>) -> PathBuf {
        let text: String = hosts.map(|h| Self::addr(h) + "\n").collect();
        self.file(name, &text)
    }

    /// A command that runs `program` on host 0.
    pub fn on_host0(&self, program: &std::path::Path) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.host_ns(0)]).arg(program);
        cmd
    }

    /// charmrun (next to `program`), run on host 0 with `args`, bounded by `limit`.
    pub fn charmrun(&self, program: &str, args: &[String], limit: Duration) -> Outcome {
        let mut cmd = self.on_host0(&charmrun_path(program));
        cmd.args(args);
        run_bounded(&mut cmd, limit)
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for h in 0..self.n {
            ip(&["netns", "del", &self.host_ns(h)]);
        }
        ip(&["netns", "del", &self.ns("sw")]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A network namespace whose firewall drops incoming UDP at random: on its loopback, every
/// datagram between two processes has that chance of being lost. Deleted when dropped.
#[derive(Debug)]
pub struct Lossy {
    /// The namespace's name.
    pub ns: String,
}

fn nft(ns: &str, rule: &str) -> bool {
    Command::new("ip")
        .args(["netns", "exec", ns, "nft"])
        .args(rule.split(' '))
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

impl Lossy {
    /// The namespace, dropping `percent` of UDP datagrams, or `None` (after saying why) when
    /// this machine cannot make it.
    ///
    /// # Panics
    /// When the namespace can be made but its firewall cannot.
    pub fn new(percent: u32) -> Option<Lossy> {
        if !nix::unistd::geteuid().is_root() {
            converse::input::error_line("skipped: network namespaces and nftables need root");
            return None;
        }
        if Command::new("nft").arg("--version").output().is_err() {
            converse::input::error_line("skipped: no nft (apt-get install nftables)");
            return None;
        }
        static MADE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let k = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let ns = format!("cvu{}l{percent}k{k}", std::process::id() % 100_000);
        if !ip(&["netns", "add", &ns]) {
            converse::input::error_line(
                "skipped: `ip netns add` failed (no iproute2 or no permission)",
            );
            return None;
        }
        let lossy = Lossy { ns };
        // Dropped on input, not output: a firewall dropping output makes `sendmsg` fail
        // with EPERM, which real loss never does.
        let ok = ip(&["-n", &lossy.ns, "link", "set", "lo", "up"])
            && nft(&lossy.ns, "add table inet loss")
            && nft(
                &lossy.ns,
                "add chain inet loss in { type filter hook input priority 0 ; }",
            )
            && nft(
                &lossy.ns,
                &format!(
                    "add rule inet loss in meta l4proto udp numgen random mod 100 < {percent} drop"
                ),
            );
        assert!(ok, "could not set up the lossy namespace {}", lossy.ns);
        Some(lossy)
    }

    /// `program` run inside the namespace.
    pub fn command(&self, program: &std::path::Path) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.ns]).arg(program);
        cmd
    }
}

impl Drop for Lossy {
    fn drop(&mut self) {
        ip(&["netns", "del", &self.ns]);
    }
}
