//! Settings a layer or the runtime reads: the variant's defaults, overridden from the command line.

use crate::error::MachineError;
use std::collections::BTreeMap;
use std::str::FromStr;

/// The setting that chooses what a node's death does: `fatal` (the default: the job ends) or
/// `report` (the survivors are told and go on). Declared by the runtime; read by every layer.
pub const FAULTS: &str = "faults";

/// Named settings (`"idle.spin_us"`, `"udp.mtu"`, ...). Layers read theirs at boot.
///
/// ```
/// let mut s = converse_machine::Settings::default();
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
        let Some(v) = self.values.get(key) else {
            return Ok(None);
        };
        // `f64` parses "nan" and "inf"; no setting means either, and a NaN would slip past
        // every range check a layer makes.
        if v.trim().parse::<f64>().is_ok_and(|f| !f.is_finite()) {
            return Err(MachineError::Setting {
                key: key.into(),
                reason: format!("'{v}' is not a finite number"),
            });
        }
        v.parse()
            .map(Some)
            .map_err(|e: T::Err| MachineError::Setting {
                key: key.into(),
                reason: format!("'{v}' does not parse: {e}"),
            })
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

    /// Whether the job reports a node's death to the survivors instead of ending
    /// (`faults=report`; the default `faults=fatal` ends it). See the report mode in
    /// [`Machine`](crate::Machine)'s contract.
    ///
    /// # Errors
    /// [`MachineError::Setting`] for a value other than `fatal` or `report`.
    pub fn reports_deaths(&self) -> Result<bool, MachineError> {
        match self.raw(FAULTS) {
            None | Some("fatal") => Ok(false),
            Some("report") => Ok(true),
            Some(other) => Err(MachineError::Setting {
                key: FAULTS.into(),
                reason: format!("{other:?} is neither \"fatal\" nor \"report\""),
            }),
        }
    }

    /// Every setting, in key order.
    /// All settings, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.values.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

/// A setting a component declares: the runtime and each layer list the keys they read, so that
/// a key nobody reads (a typo, a layer not compiled in) is refused instead of ignored. The
/// default lives in the code that reads the setting, once; variant files only override it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SettingSpec {
    /// The key, `"component.name"`.
    pub key: &'static str,
    /// One line: what it sets, its unit and its default.
    pub meaning: &'static str,
}

impl Settings {
    /// Refuse any key not declared in `known` (the runtime's and every compiled-in layer's
    /// declarations), and any value that is a non-finite number (no setting means NaN or
    /// infinity; this catches them even for a layer not booted in this job).
    ///
    /// # Errors
    /// [`MachineError::Setting`] for the first unknown key, naming the known ones, or the
    /// first non-finite value.
    ///
    /// ```
    /// use converse_machine::{Settings, SettingSpec};
    /// const MINE: &[SettingSpec] = &[SettingSpec { key: "udp.mtu", meaning: "largest packet" }];
    /// let mut s = Settings::default();
    /// s.set("udp.mut", "1400");
    /// let e = s.check_known(&[MINE]).unwrap_err().to_string();
    /// assert_eq!(e, "setting udp.mut: no such setting (known: udp.mtu)");
    /// ```
    pub fn check_known(&self, known: &[&[SettingSpec]]) -> Result<(), MachineError> {
        for k in self.values.keys() {
            self.get::<String>(k)?;
        }
        let is_known = |k: &str| known.iter().flat_map(|l| l.iter()).any(|s| s.key == k);
        match self.values.keys().find(|k| !is_known(k)) {
            None => Ok(()),
            Some(k) => {
                let mut names: Vec<&str> =
                    known.iter().flat_map(|l| l.iter().map(|s| s.key)).collect();
                names.sort_unstable();
                names.dedup();
                Err(MachineError::Setting {
                    key: k.clone(),
                    reason: format!("no such setting (known: {})", names.join(", ")),
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_finite_numbers_are_refused_for_every_type() {
        for v in ["nan", "NaN", "inf", "-inf", "infinity"] {
            let mut s = Settings::default();
            s.set("k", v);
            let e = s.get::<f64>("k").err().map(|e| e.to_string());
            assert_eq!(e, Some(format!("setting k: '{v}' is not a finite number")));
        }
        let mut s = Settings::default();
        s.set("k", "2.5");
        assert_eq!(s.get::<f64>("k").ok().flatten(), Some(2.5));
    }

    #[test]
    fn known_keys_pass() {
        const A: &[SettingSpec] = &[SettingSpec {
            key: "a.x",
            meaning: "",
        }];
        const B: &[SettingSpec] = &[SettingSpec {
            key: "b.y",
            meaning: "",
        }];
        let mut s = Settings::default();
        s.set("a.x", "1");
        s.set("b.y", "2");
        assert!(s.check_known(&[A, B]).is_ok());
        assert!(s.check_known(&[A]).is_err());
    }
}
