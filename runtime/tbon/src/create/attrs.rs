//! MRNet's network settings (the guide's Appendix G, Table 3) by their names: as environment
//! variables and as the attribute map of `CreateNetworkFE`, onto [`Settings`].
//!
//! Every name of Table 3 is known. A value that does not parse is refused, naming the setting
//! and what it takes; an unknown name is refused too, never ignored. A setting the overlay has
//! no use for (the Cray ALPS ones, ports and poll timeouts of MRNet's own transport) is
//! checked as far as it can be and then named in a one-line warning.

use super::Settings;
use crate::error::TbonError;
use std::path::PathBuf;
use std::time::Duration;

/// The settings read from the environment by [`Settings::from_env`], in the order they are
/// applied (so `MRNET_COMM_PATH` wins over the deprecated `MRN_COMM_PATH`).
pub const ENV_SETTINGS: [&str; 14] = [
    "XPLAT_RSH",
    "XPLAT_RSH_ARGS",
    "XPLAT_REMCMD",
    "XPLAT_RESOLVE_HOSTS",
    "XPLAT_RESOLVE_CANONICAL",
    "MRNET_DEBUG_LEVEL",
    "MRNET_DEBUG_LOG_DIRECTORY",
    "MRN_COMM_PATH",
    "MRNET_COMM_PATH",
    "MRNET_STARTUP_TIMEOUT",
    "MRNET_FAILURE_RECOVERY",
    "MRNET_PORT_BASE",
    "MRNET_EVENT_WAIT_TIMEOUT_MSEC",
    "MRNET_TOPOLOGY_UPDATE_TIMEOUT_MSEC",
];

/// Attributes only (the guide: "there are no corresponding environment variables").
const ATTR_ONLY: [&str; 3] = [
    "CRAY_ALPS_APID",
    "CRAY_ALPS_APRUN_PID",
    "CRAY_ALPS_STAGE_FILES",
];

fn usage(key: &str, value: &str, takes: &str) -> TbonError {
    // Escaped: the error stays one line whatever the value holds.
    TbonError::Usage(format!(
        "{key}={:?} is not valid: it takes {takes}",
        value.escape_debug().to_string()
    ))
}

fn flag(key: &str, value: &str) -> Result<bool, TbonError> {
    match value.trim() {
        "1" => Ok(true),
        "0" => Ok(false),
        _ => Err(usage(key, value, "1 or 0")),
    }
}

fn whole(key: &str, value: &str, takes: &str) -> Result<u64, TbonError> {
    value
        .trim()
        .parse::<u64>()
        .map_err(|_| usage(key, value, takes))
}

fn words(key: &str, value: &str) -> Result<Vec<String>, TbonError> {
    charmrun::opts::shell_words(value)
        .ok_or_else(|| usage(key, value, "a command, words quoted as a shell quotes them"))
}

impl Settings {
    /// [`Settings::new`], then every setting of the guide's Appendix G set in the
    /// environment ([`ENV_SETTINGS`]), as MRNet's `CreateNetworkFE` reads them. Fields set
    /// afterwards, and [`attrs`](Settings::attrs) applied afterwards, win over the
    /// environment, as MRNet's attributes do.
    ///
    /// # Errors
    /// [`TbonError::Usage`] naming a variable whose value is malformed.
    pub fn from_env(backend: &str, args: &[&str]) -> Result<Settings, TbonError> {
        let mut s = Settings::new(backend, args);
        for key in ENV_SETTINGS {
            match std::env::var(key) {
                Ok(v) => s.attr(key, &v)?,
                Err(std::env::VarError::NotPresent) => {}
                Err(std::env::VarError::NotUnicode(v)) => {
                    return Err(TbonError::Usage(format!("{key}={v:?} is not valid text")))
                }
            }
        }
        Ok(s)
    }

    /// Apply MRNet's attribute map (`CreateNetworkFE`'s `attrs`): each pair sets the setting
    /// of that name, as [`attr`](Settings::attr) does, in order.
    ///
    /// ```
    /// # #[cfg(feature = "launcher")] {
    /// use converse_tbon::create::Settings;
    /// let s = Settings::new("./be", &[])
    ///     .attrs([("XPLAT_RSH", "rsh"), ("MRNET_STARTUP_TIMEOUT", "30")])
    ///     .unwrap();
    /// assert_eq!(s.remote_shell, "rsh");
    /// assert!(Settings::new("./be", &[]).attrs([("MRNET_STARTUP_TIMEOUT", "soon")]).is_err());
    /// # }
    /// ```
    ///
    /// # Errors
    /// As [`attr`](Settings::attr), for the first pair refused.
    pub fn attrs<K: AsRef<str>, V: AsRef<str>>(
        mut self,
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Result<Settings, TbonError> {
        for (k, v) in pairs {
            self.attr(k.as_ref(), v.as_ref())?;
        }
        Ok(self)
    }

    /// Set the setting MRNet names `key` (Appendix G) to `value`. A setting the overlay does
    /// not use is checked, then named in a one-line warning on standard error.
    ///
    /// # Errors
    /// [`TbonError::Usage`] for an unknown name or a malformed value, in one line.
    pub fn attr(&mut self, key: &str, value: &str) -> Result<(), TbonError> {
        if let Some(warning) = self.apply(key, value)? {
            converse::input::error_line(&format!("tbon: warning: {warning}"));
        }
        Ok(())
    }

    /// [`attr`](Settings::attr) without the printing: the warning, if any.
    pub(crate) fn apply(&mut self, key: &str, value: &str) -> Result<Option<String>, TbonError> {
        let text = |takes: &str| -> Result<String, TbonError> {
            let v = value.trim();
            if v.is_empty() {
                return Err(usage(key, value, takes));
            }
            Ok(v.to_owned())
        };
        match key {
            "XPLAT_RSH" => self.remote_shell = text("the remote shell program, e.g. ssh")?,
            "XPLAT_RSH_ARGS" => self.remote_shell_args = words(key, value)?,
            "XPLAT_REMCMD" => {
                let w = words(key, value)?;
                self.remote_cmd = (!w.is_empty()).then_some(w);
            }
            "XPLAT_RESOLVE_HOSTS" => self.resolve_hosts = flag(key, value)?,
            "XPLAT_RESOLVE_CANONICAL" => self.resolve_canonical = flag(key, value)?,
            "MRNET_DEBUG_LEVEL" => {
                let l = whole(key, value, "a level from 0 to 5")?;
                if l > 5 {
                    return Err(usage(key, value, "a level from 0 to 5"));
                }
                self.debug_level = Some(l as u8);
            }
            "MRNET_DEBUG_LOG_DIRECTORY" => {
                let d = PathBuf::from(text("an absolute path to a directory")?);
                if !d.is_absolute() || !d.is_dir() {
                    return Err(usage(
                        key,
                        value,
                        "an absolute path to a directory that exists",
                    ));
                }
                self.log_directory = Some(d);
            }
            "MRNET_COMM_PATH" | "MRN_COMM_PATH" => {
                self.internal = Some(text("the program internal processes run")?)
            }
            "MRNET_STARTUP_TIMEOUT" => {
                let secs = whole(key, value, "a whole number of seconds, at least 1")?;
                if secs == 0 {
                    return Err(usage(key, value, "a whole number of seconds, at least 1"));
                }
                self.timeout = Duration::from_secs(secs);
            }
            "MRNET_FAILURE_RECOVERY" => self.failure_recovery = Some(flag(key, value)?),
            "MRNET_PORT_BASE" => {
                let p = whole(key, value, "a port number")?;
                if p == 0 || p > u64::from(u16::MAX) {
                    return Err(usage(key, value, "a port number"));
                }
                return Ok(Some(format!(
                    "{key} has no effect: processes of the network listen on no port of their \
                     own, and attach-mode leaves on ports the system chooses"
                )));
            }
            "MRNET_EVENT_WAIT_TIMEOUT_MSEC" | "MRNET_TOPOLOGY_UPDATE_TIMEOUT_MSEC" => {
                whole(key, value, "a whole number of milliseconds")?;
                return Ok(Some(format!(
                    "{key} has no effect: events are raised when they happen, not polled for"
                )));
            }
            k if ATTR_ONLY.contains(&k) => {
                text("a value")?;
                return Ok(Some(format!(
                    "{key} is not supported: the tree overlay has no Cray ALPS support"
                )));
            }
            _ => {
                return Err(TbonError::Usage(format!(
                    "unknown network setting {:?} (the settings are {} and {})",
                    key.escape_debug().to_string(),
                    ENV_SETTINGS.join(", "),
                    ATTR_ONLY.join(", ")
                )))
            }
        }
        Ok(None)
    }

    /// The remote shell command the launcher runs, as one line of shell words:
    /// `XPLAT_REMCMD`, then `XPLAT_RSH`, then `XPLAT_RSH_ARGS`.
    pub(crate) fn shell_command(&self) -> String {
        let mut out: Vec<String> = Vec::new();
        out.extend(self.remote_cmd.iter().flatten().map(|w| quote(w)));
        // Already shell words (`ssh -o BatchMode=yes` splits as a shell splits it).
        out.push(self.remote_shell.clone());
        out.extend(self.remote_shell_args.iter().map(|w| quote(w)));
        out.join(" ")
    }
}

/// `w` as one shell word.
fn quote(w: &str) -> String {
    if !w.is_empty()
        && w.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c))
    {
        return w.to_owned();
    }
    format!("'{}'", w.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fresh() -> Settings {
        Settings::new("./be", &[])
    }

    #[test]
    fn every_name_of_appendix_g_sets_its_setting() {
        let dir = std::env::temp_dir();
        let s = fresh()
            .attrs([
                ("XPLAT_RSH", "rsh"),
                ("XPLAT_RSH_ARGS", "-l 'a user'"),
                ("XPLAT_REMCMD", "runauth"),
                ("XPLAT_RESOLVE_HOSTS", "0"),
                ("XPLAT_RESOLVE_CANONICAL", "1"),
                ("MRNET_DEBUG_LEVEL", "3"),
                ("MRNET_DEBUG_LOG_DIRECTORY", &dir.display().to_string()),
                ("MRN_COMM_PATH", "/old/commnode"),
                ("MRNET_COMM_PATH", "/opt/commnode"),
                ("MRNET_STARTUP_TIMEOUT", "7"),
                ("MRNET_FAILURE_RECOVERY", "0"),
            ])
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.remote_shell, "rsh");
        assert_eq!(s.remote_shell_args, ["-l", "a user"]);
        assert_eq!(s.shell_command(), "runauth rsh -l 'a user'");
        assert!(!s.resolve_hosts && s.resolve_canonical);
        assert_eq!(s.debug_level, Some(3));
        assert_eq!(s.log_directory.as_deref(), Some(dir.as_path()));
        assert_eq!(s.internal.as_deref(), Some("/opt/commnode"));
        assert_eq!(s.timeout, Duration::from_secs(7));
        assert_eq!(s.failure_recovery, Some(false));
        // Later pairs win, as the environment gives way to attributes.
        let s = fresh()
            .attrs([("XPLAT_RSH", "rsh"), ("XPLAT_RSH", "ssh -x")])
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.shell_command(), "ssh -x");
    }

    #[test]
    fn malformed_and_unknown_settings_are_refused_in_one_line() {
        for (k, v, want) in [
            ("XPLAT_RESOLVE_HOSTS", "yes", "it takes 1 or 0"),
            ("XPLAT_RESOLVE_CANONICAL", "", "it takes 1 or 0"),
            ("XPLAT_RSH", "  ", "the remote shell program"),
            (
                "XPLAT_RSH_ARGS",
                "-o 'unclosed",
                "quoted as a shell quotes them",
            ),
            ("MRNET_STARTUP_TIMEOUT", "0", "at least 1"),
            ("MRNET_STARTUP_TIMEOUT", "1.5", "whole number of seconds"),
            ("MRNET_DEBUG_LEVEL", "6", "from 0 to 5"),
            ("MRNET_DEBUG_LOG_DIRECTORY", "logs", "an absolute path"),
            (
                "MRNET_DEBUG_LOG_DIRECTORY",
                "/no/such/dir/here",
                "a directory that exists",
            ),
            ("MRNET_FAILURE_RECOVERY", "on", "1 or 0"),
            ("MRNET_PORT_BASE", "70000", "a port number"),
            ("MRNET_EVENT_WAIT_TIMEOUT_MSEC", "-1", "milliseconds"),
            (
                "XPLAT_RSH\n",
                "ssh",
                "unknown network setting \"XPLAT_RSH\\\\n\"",
            ),
            ("MRNET_TYPO", "1", "unknown network setting \"MRNET_TYPO\""),
        ] {
            let e = fresh()
                .apply(k, v)
                .err()
                .unwrap_or_else(|| panic!("{k}={v:?} accepted"))
                .to_string();
            assert!(e.contains(want), "{k}={v:?}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn settings_the_overlay_does_not_use_are_named_in_a_warning() {
        for k in ATTR_ONLY {
            let w = fresh().apply(k, "1234").unwrap_or_else(|e| panic!("{e}"));
            let w = w.unwrap_or_else(|| panic!("{k}: no warning"));
            assert!(w.starts_with(k) && w.contains("not supported"), "{w}");
            assert!(!w.contains('\n'));
        }
        for (k, v) in [
            ("MRNET_PORT_BASE", "26500"),
            ("MRNET_EVENT_WAIT_TIMEOUT_MSEC", "100"),
        ] {
            let w = fresh().apply(k, v).unwrap_or_else(|e| panic!("{e}"));
            assert!(w.is_some_and(|w| w.contains("no effect")), "{k}");
        }
        assert!(matches!(fresh().apply("XPLAT_RSH", "rsh"), Ok(None)));
    }
}
