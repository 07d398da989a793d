//! Starting node processes: directly on this host, or through a remote shell.

use std::io;
use std::net::{IpAddr, Ipv4Addr, ToSocketAddrs, UdpSocket};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};

/// Start `program args` here with `env`, stdout and stderr piped, in a process group of its
/// own (so a Ctrl-C at the terminal reaches charmrun, which ends the job in order).
///
/// Nothing runs between fork and exec, so the standard library can use `posix_spawn`, several
/// times cheaper than `fork` from a threaded charmrun. A node still dies with charmrun: its
/// watchdog exits when the control connection drops, which the kernel does for a killed
/// charmrun too; before it connects, a node without charmrun cannot start at all.
///
/// # Errors
/// When the process cannot be started.
pub fn local(program: &str, args: &[String], env: &[(String, String)]) -> io::Result<Child> {
    Command::new(program)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
}

/// Start `program args` on `host` through `shell` (`ssh`, or any command taking
/// `HOST COMMAND`; split into words as a shell splits it, so a quoted word may hold spaces): `cd` to `cwd`, set `env`, exec the program. `secret` (a variable) is not put
/// on any command line, where every user of both hosts could read it: the remote shell reads it
/// from its standard input.
///
/// # Errors
/// When the remote shell cannot be started.
pub fn remote(
    shell: &str,
    host: &str,
    cwd: &str,
    program: &str,
    args: &[String],
    env: &[(String, String)],
    secret: (&str, &str),
) -> io::Result<Child> {
    let words = crate::opts::shell_words(shell).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("remote shell '{shell}' is empty or its quotes do not close"),
        )
    })?;
    let Some((cmd_name, rest)) = words.split_first() else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "empty remote shell",
        ));
    };
    let mut cmd = Command::new(cmd_name);
    cmd.args(rest);
    if cmd_name.rsplit('/').next() == Some("ssh") {
        // Never stop to ask for a password: a host we cannot reach is an error, not a prompt.
        cmd.args(["-o", "BatchMode=yes"]);
    }
    let (secret_var, secret_value) = secret;
    let mut line = format!(
        "cd {} && IFS= read -r {secret_var} && export {secret_var} && exec env",
        quote(cwd)
    );
    for (k, v) in env {
        line.push(' ');
        line.push_str(&quote(&format!("{k}={v}")));
    }
    line.push(' ');
    line.push_str(&quote(program));
    for a in args {
        line.push(' ');
        line.push_str(&quote(a));
    }
    cmd.arg(host)
        .arg(line)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = cmd.spawn()?;
    if let Some(mut stdin) = child.stdin.take() {
        // Dropped at the end of this block: the remote side then sees the end of its input.
        use std::io::Write;
        let _ = writeln!(stdin, "{secret_value}");
    }
    Ok(child)
}

/// Start a batch launcher (`words`, e.g. `mpiexec -n 4` or `srun --ntasks=2`) running
/// `program args` in each of its tasks, with `env` added to the environment it passes on; in a
/// process group of its own, output piped, as a node.
///
/// # Errors
/// When `words` is empty or the launcher cannot be started.
pub fn launcher(
    words: &[String],
    program: &str,
    args: &[String],
    env: &[(String, String)],
) -> io::Result<Child> {
    let Some((name, rest)) = words.split_first() else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "empty launcher command",
        ));
    };
    Command::new(name)
        .args(rest)
        .arg(program)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
}

/// An address of this host that other hosts may reach: what its own host name resolves to,
/// unless that is loopback (Debian's 127.0.1.1 entry); else the first IPv4 address of an
/// interface that is up and not loopback; loopback when there is none (a one-host job).
pub fn outward_address() -> IpAddr {
    use nix::net::if_::InterfaceFlags;
    let named = (crate::client::hostname().as_str(), 0)
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.find(|a| a.is_ipv4() && !a.ip().is_loopback()));
    if let Some(a) = named {
        return a.ip();
    }
    nix::ifaddrs::getifaddrs()
        .ok()
        .and_then(|mut addrs| {
            addrs.find_map(|a| {
                let up = a.flags.contains(InterfaceFlags::IFF_UP)
                    && !a.flags.contains(InterfaceFlags::IFF_LOOPBACK);
                let ip = a.address?.as_sockaddr_in()?.ip();
                up.then_some(IpAddr::V4(ip))
            })
        })
        .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))
}

/// Quote a word for a POSIX shell.
pub fn quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-=:+,@".contains(&b))
    {
        return s.to_owned();
    }
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// The address of this host on the route to `host`: where a node started there can reach
/// charmrun. Asks the kernel's routing (a UDP "connect" sends nothing).
///
/// # Errors
/// When `host` does not resolve or has no route.
pub fn address_towards(host: &str) -> io::Result<IpAddr> {
    // IPv4 first: charmrun's control socket listens on IPv4.
    let mut addrs: Vec<_> = (host, 9).to_socket_addrs()?.collect();
    addrs.sort_by_key(|a| !a.is_ipv4());
    let target = addrs
        .into_iter()
        .next()
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("{host} has no address")))?;
    if target.ip().is_loopback() {
        return Ok(IpAddr::V4(Ipv4Addr::LOCALHOST));
    }
    let bind: IpAddr = if target.is_ipv4() {
        Ipv4Addr::UNSPECIFIED.into()
    } else {
        std::net::Ipv6Addr::UNSPECIFIED.into()
    };
    let s = UdpSocket::bind((bind, 0))?;
    s.connect(target)?;
    Ok(s.local_addr()?.ip())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(quote("/a/b-c_d.e"), "/a/b-c_d.e");
        assert_eq!(quote("it's"), "'it'\\''s'");
        assert_eq!(quote(""), "''");
        assert_eq!(quote("a b"), "'a b'");
    }

    #[test]
    fn loopback_route() {
        assert_eq!(
            address_towards("127.0.0.1").ok(),
            Some(IpAddr::V4(Ipv4Addr::LOCALHOST))
        );
    }
}
