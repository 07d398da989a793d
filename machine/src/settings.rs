//! Settings a layer or the runtime reads: the variant's defaults, overridden from the command line.

use crate::error::MachineError;
use std::collections::BTreeMap;
use std::str::FromStr;

/// Named settings (`"idle.spin_us"`, `"udp.mtu"`, ...). Layers read theirs at boot.
///
/// ```
/// let mut s = machine::Settings::default();
/// s.set("udp.mtu", "1400");
/// assert_eq!(s.get::<usize>("udp.mtu").unwrap(), Some(1400));
/// assert!(s.get::<usize>("udp.window").unwrap().is_none());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settings {
    values: BTreeMap<String, String>,
}

impl Settings {
    /// Set (or replace) a setting.
    pub fn set(&mut self, key: impl Into<String>, value: impl Into<String>) {
        self.values.insert(key.into(), value.into());
    }

    /// The raw text of a setting.
    pub fn raw(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(String::as_str)
    }

    /// A setting parsed as `T`; `Ok(None)` when it is not set.
    ///
    /// # Errors
    /// [`MachineError::Setting`] when the value does not parse as `T`.
    pub fn get<T: FromStr>(&self, key: &str) -> Result<Option<T>, MachineError>
    where
        T::Err: std::fmt::Display,
    {
        match self.values.get(key) {
            None => Ok(None),
            Some(v) => v
                .parse()
                .map(Some)
                .map_err(|e: T::Err| MachineError::Setting {
                    key: key.into(),
                    reason: format!("'{v}' does not parse: {e}"),
                }),
        }
    }

    /// A setting parsed as `T`, or `default` when it is not set.
    ///
    /// # Errors
    /// As [`get`](Self::get).
    pub fn get_or<T: FromStr>(&self, key: &str, default: T) -> Result<T, MachineError>
    where
        T::Err: std::fmt::Display,
    {
        Ok(self.get(key)?.unwrap_or(default))
    }

    /// All settings, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.values.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}
