//! Hosts made of network namespaces, for jobs across hosts: each "host" is a network
//! namespace with its own interface, joined to the others by veth pairs on a bridge, so
//! start-up and every message cross a real network stack. charmrun runs on one host and
//! reaches the others through a remote-shell command that runs `ip netns exec HOST ...`,
//! exactly as it would use ssh. Needs root (to create namespaces); without it
//! [`Hosts::new`] says the test is skipped.

use crate::{ip, run_bounded, Outcome};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Three hosts: 10.99.0.1 (where charmrun runs), 10.99.0.2, 10.99.0.3.
#[derive(Debug)]
pub struct Hosts {
    prefix: String,
    /// A directory for the test's files, removed with the hosts.
    pub dir: PathBuf,
}

/// The hosts' addresses.
pub const IPS: [&str; 3] = ["10.99.0.1", "10.99.0.2", "10.99.0.3"];

impl Hosts {
    /// Build the hosts, or `None` (after saying why) when this machine cannot.
    pub fn new(tag: &str) -> Option<Hosts> {
        if !nix::unistd::geteuid().is_root() {
            converse::input::error_line("skipped: creating network namespaces needs root");
            return None;
        }
        let prefix = format!("cv{}{tag}", std::process::id() % 100_000);
        let dir = std::env::temp_dir().join(format!("{prefix}-multihost"));
        let hosts = Hosts { prefix, dir };
        let sw = hosts.ns("sw");
        if !ip(&["netns", "add", &sw]) {
            converse::input::error_line(
                "skipped: `ip netns add` failed (no iproute2 or no permission)",
            );
            return None;
        }
        let ok = ip(&["-n", &sw, "link", "add", "br0", "type", "bridge"])
            && ip(&["-n", &sw, "link", "set", "br0", "up"])
            && (0..IPS.len()).all(|h| hosts.add_host(h));
        if !ok {
            panic!(
                "could not build the test network in namespaces {}*",
                hosts.prefix
            );
        }
        std::fs::create_dir_all(&hosts.dir).expect("temp dir");
        Some(hosts)
    }

    fn ns(&self, name: &str) -> String {
        format!("{}-{name}", self.prefix)
    }

    /// Host `h`'s namespace.
    pub fn host_ns(&self, h: usize) -> String {
        self.ns(&format!("h{h}"))
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
                &format!("{}/24", IPS[h]),
                "dev",
                &inner,
            ])
            && ip(&["-n", &ns, "link", "set", &inner, "up"])
            && ip(&["-n", &ns, "link", "set", "lo", "up"])
    }

    /// A remote-shell command: `SHELL HOST COMMAND` runs COMMAND in HOST's namespace.
    pub fn shell(&self) -> PathBuf {
        let path = self.dir.join("netns-shell");
        // Logs its arguments, so a test can check what a remote shell's command line shows.
        let log = self.dir.join("shell-args.log");
        let mut script = format!(
            "#!/bin/sh\necho \"$*\" >> {}\nhost=\"$1\"; shift\ncase \"$host\" in\n  localhost) ns={} ;;\n",
            log.display(),
            self.host_ns(0)
        );
        for (h, addr) in IPS.iter().enumerate() {
            script.push_str(&format!("  {addr}) ns={} ;;\n", self.host_ns(h)));
        }
        // Each host also gets a host name of its own, as real hosts have.
        script.push_str("  *) echo \"netns-shell: no route to host $host\" >&2; exit 255 ;;\nesac\nexec ip netns exec \"$ns\" unshare --uts sh -c \"hostname $ns && $1\"\n");
        std::fs::write(&path, script).expect("write shell");
        Command::new("chmod")
            .arg("+x")
            .arg(&path)
            .status()
            .expect("chmod");
        path
    }

    /// Write a file of the test's.
    pub fn file(&self, name: &str, text: &str) -> PathBuf {
        let p = self.dir.join(name);
        std::fs::write(&p, text).expect("write file");
        p
    }

    /// charmrun (the one next to `program`), run on host 0 with `args`.
    pub fn charmrun(&self, program: &str, args: &[String]) -> Outcome {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.host_ns(0)])
            .arg(crate::charmrun_path(program))
            .args(args);
        run_bounded(&mut cmd, Duration::from_secs(90))
    }

    /// A command run on host `h`.
    pub fn on(&self, h: usize, program: &Path) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.host_ns(h)]).arg(program);
        cmd
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for h in 0..IPS.len() {
            ip(&["netns", "del", &self.host_ns(h)]);
        }
        ip(&["netns", "del", &self.ns("sw")]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
