//! Settings a layer or the runtime reads: the variant's defaults, overridden from the command line.

use crate::error::MachineError;
use std::collections::BTreeMap;
use std::str::FromStr;

/// The setting that chooses what a node's death does: `fatal` (the default: the job ends) or
/// `report` (the survivors are told and go on). Declared by the runtime; read by every layer.
pub const FAULTS: &str = "faults";

/// The declaration of [`FAULTS`] (the runtime lists it among its own).
pub const FAULTS_SETTING: SettingSpec = SettingSpec::choice(
    FAULTS,
    &["fatal", "report"],
    "what a node's death does: fatal ends the job, naming it; report tells the survivors, \
     and the job goes on; not on mpi",
);

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
        Ok(FAULTS_SETTING.read_choice(self)? == "report")
    }

    /// Every setting, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.values.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

/// A setting a component declares, once: its key, the type of its value with the default and
/// bounds, and what it sets. The runtime and each layer list the settings they read, so that a
/// key nobody reads (a typo, a layer not compiled in) is refused instead of ignored; the
/// readers ([`read_whole`](Self::read_whole), [`read_seconds`](Self::read_seconds), ...) apply the default and
/// the bounds declared here, the layers' `check`, the runtime's `+settings` listing and
/// README's table are made from the same declarations, so nothing is stated twice.
///
/// ```
/// use converse_machine::{SettingSpec, Settings};
/// const WINDOW: SettingSpec = SettingSpec::whole("udp.window", 128, 4, 4096, "packets in flight per peer");
/// let mut s = Settings::default();
/// assert_eq!(WINDOW.read_whole(&s).unwrap(), 128);
/// s.set("udp.window", "2");
/// assert_eq!(WINDOW.read_whole(&s).unwrap_err().to_string(), "setting udp.window: 2 is outside 4..=4096");
/// assert_eq!(WINDOW.describe(), "packets in flight per peer (4..=4096; default 128)");
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SettingSpec {
    /// The key, `"component.name"`.
    pub key: &'static str,
    /// Its type, default and bounds.
    pub value: Value,
    /// One line: what it sets, and its unit. The default and bounds are `value`'s.
    pub meaning: &'static str,
    /// A default computed at run time (from a limit of the host, a measurement): what it is,
    /// said in listings instead of `value`'s.
    pub computed: Option<&'static str>,
}

/// The type of a setting's value, with its default and bounds.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum Value {
    /// A whole number in `min..=max`.
    Whole {
        /// When not set.
        default: u64,
        /// Smallest accepted.
        min: u64,
        /// Largest accepted.
        max: u64,
    },
    /// A power of two in `min..=max`.
    PowerOfTwo {
        /// When not set.
        default: u64,
        /// Smallest accepted.
        min: u64,
        /// Largest accepted.
        max: u64,
    },
    /// Seconds, finite, in `min..=max` (`min` above 0).
    Seconds {
        /// When not set.
        default: f64,
        /// Smallest accepted.
        min: f64,
        /// Largest accepted.
        max: f64,
    },
    /// `true` or `false` (also `1`/`0`, `yes`/`no`).
    Flag {
        /// When not set.
        default: bool,
    },
    /// One of these words; the first is the default.
    Choice {
        /// The words accepted, the default first.
        choices: &'static [&'static str],
    },
    /// Text the component parses itself (an address, a size or a word); unset by default.
    Text,
}

fn refuse(key: &str, reason: String) -> MachineError {
    MachineError::Setting {
        key: key.into(),
        reason,
    }
}

impl SettingSpec {
    /// A whole number in `min..=max`, `default` when not set.
    pub const fn whole(
        key: &'static str,
        default: u64,
        min: u64,
        max: u64,
        meaning: &'static str,
    ) -> SettingSpec {
        SettingSpec {
            key,
            value: Value::Whole { default, min, max },
            meaning,
            computed: None,
        }
    }

    /// A power of two in `min..=max`, `default` when not set.
    pub const fn power_of_two(
        key: &'static str,
        default: u64,
        min: u64,
        max: u64,
        meaning: &'static str,
    ) -> SettingSpec {
        SettingSpec {
            key,
            value: Value::PowerOfTwo { default, min, max },
            meaning,
            computed: None,
        }
    }

    /// Seconds in `min..=max`, `default` when not set.
    pub const fn seconds(
        key: &'static str,
        default: f64,
        min: f64,
        max: f64,
        meaning: &'static str,
    ) -> SettingSpec {
        SettingSpec {
            key,
            value: Value::Seconds { default, min, max },
            meaning,
            computed: None,
        }
    }

    /// `true` or `false`, `default` when not set.
    pub const fn flag(key: &'static str, default: bool, meaning: &'static str) -> SettingSpec {
        SettingSpec {
            key,
            value: Value::Flag { default },
            meaning,
            computed: None,
        }
    }

    /// One of `choices`, the first when not set.
    pub const fn choice(
        key: &'static str,
        choices: &'static [&'static str],
        meaning: &'static str,
    ) -> SettingSpec {
        SettingSpec {
            key,
            value: Value::Choice { choices },
            meaning,
            computed: None,
        }
    }

    /// Text its component parses itself.
    pub const fn text(key: &'static str, meaning: &'static str) -> SettingSpec {
        SettingSpec {
            key,
            value: Value::Text,
            meaning,
            computed: None,
        }
    }

    /// The same, with a default computed at run time, `how` saying what it is.
    pub const fn computed(self, how: &'static str) -> SettingSpec {
        SettingSpec {
            computed: Some(how),
            ..self
        }
    }

    /// A whole number or power of two: the value set, else the declared default.
    ///
    /// # Errors
    /// [`MachineError::Setting`] saying what was wrong (not a number, negative, out of range,
    /// not a power of two) and what is accepted.
    pub fn read_whole(&self, s: &Settings) -> Result<u64, MachineError> {
        let default = match self.value {
            Value::Whole { default, .. } | Value::PowerOfTwo { default, .. } => default,
            _ => return Err(self.mistyped("a whole number")),
        };
        self.read_whole_or(s, default)
    }

    /// [`read_whole`](Self::read_whole) with a default computed at run time.
    ///
    /// # Errors
    /// As [`read_whole`](Self::read_whole).
    pub fn read_whole_or(&self, s: &Settings, default: u64) -> Result<u64, MachineError> {
        let (min, max, pow2) = match self.value {
            Value::Whole { min, max, .. } => (min, max, false),
            Value::PowerOfTwo { min, max, .. } => (min, max, true),
            _ => return Err(self.mistyped("a whole number")),
        };
        let Some(v) = s.raw(self.key) else {
            return Ok(default);
        };
        let n = v.parse::<u64>().map_err(|e| {
            let reason = match e.kind() {
                std::num::IntErrorKind::Empty => "no value".to_string(),
                std::num::IntErrorKind::PosOverflow => format!("{v} is outside {min}..={max}"),
                _ if is_negative_integer(v) => format!("{v} is negative"),
                _ => format!("'{v}' is not a whole number"),
            };
            refuse(
                self.key,
                format!("{reason}: give a whole number in {min}..={max}"),
            )
        })?;
        if pow2 && !(n.is_power_of_two() && (min..=max).contains(&n)) {
            return Err(refuse(
                self.key,
                format!("{n} is not a power of two from {min} to {max}"),
            ));
        }
        if !(min..=max).contains(&n) {
            return Err(refuse(self.key, format!("{n} is outside {min}..={max}")));
        }
        Ok(n)
    }

    /// Seconds: the value set, else the declared default. NaN, infinities, negative numbers
    /// and zero are refused by name, never handed to `Duration` (which would panic on them).
    ///
    /// # Errors
    /// [`MachineError::Setting`] saying what was wrong and what is accepted.
    pub fn read_seconds(&self, s: &Settings) -> Result<std::time::Duration, MachineError> {
        let Value::Seconds { default, min, max } = self.value else {
            return Err(self.mistyped("seconds"));
        };
        let Some(v) = s.raw(self.key) else {
            return Ok(std::time::Duration::from_secs_f64(default));
        };
        let say = |what: String| refuse(self.key, format!("{what}: give seconds in {min}..={max}"));
        let x: f64 = v
            .parse()
            .map_err(|_| say(format!("'{v}' is not a number")))?;
        if x.is_nan() {
            return Err(say(format!("'{v}' is not a number")));
        }
        if x.is_infinite() {
            return Err(say(format!("'{v}' is not finite")));
        }
        if x < 0.0 {
            return Err(say(format!("{v} is negative")));
        }
        if x == 0.0 {
            return Err(say(format!("{v} is zero")));
        }
        if x < min || x > max {
            return Err(refuse(self.key, format!("{v} is outside {min}..={max}")));
        }
        Ok(std::time::Duration::from_secs_f64(x))
    }

    /// A flag: the value set, else the declared default.
    ///
    /// # Errors
    /// [`MachineError::Setting`] for a value that is not true or false.
    pub fn read_flag(&self, s: &Settings) -> Result<bool, MachineError> {
        let Value::Flag { default } = self.value else {
            return Err(self.mistyped("a flag"));
        };
        match s.raw(self.key) {
            None => Ok(default),
            Some("1" | "true" | "yes") => Ok(true),
            Some("0" | "false" | "no") => Ok(false),
            Some(v) => Err(refuse(self.key, format!("'{v}' is not true or false"))),
        }
    }

    /// A choice: the word set, else the first.
    ///
    /// # Errors
    /// [`MachineError::Setting`] for a word not among the choices.
    pub fn read_choice(&self, s: &Settings) -> Result<&'static str, MachineError> {
        let Value::Choice { choices } = self.value else {
            return Err(self.mistyped("a choice"));
        };
        let Some(v) = s.raw(self.key) else {
            return choices
                .first()
                .copied()
                .ok_or_else(|| self.mistyped("a choice"));
        };
        choices.iter().find(|c| **c == v).copied().ok_or_else(|| {
            let quoted: Vec<String> = choices.iter().map(|c| format!("{c:?}")).collect();
            refuse(
                self.key,
                format!("{v:?} is not one of {}", quoted.join(", ")),
            )
        })
    }

    /// Text: the value set, if any (an empty one counts as unset).
    pub fn read_text<'a>(&self, s: &'a Settings) -> Option<&'a str> {
        s.raw(self.key).filter(|v| !v.is_empty())
    }

    /// Parse the value set as [`value`](Self::value) says (text is the component's to parse).
    ///
    /// # Errors
    /// The reader's.
    pub fn check(&self, s: &Settings) -> Result<(), MachineError> {
        match self.value {
            Value::Whole { .. } | Value::PowerOfTwo { .. } => self.read_whole(s).map(drop),
            Value::Seconds { .. } => self.read_seconds(s).map(drop),
            Value::Flag { .. } => self.read_flag(s).map(drop),
            Value::Choice { .. } => self.read_choice(s).map(drop),
            Value::Text => Ok(()),
        }
    }

    /// One line for listings: the meaning, then the bounds and the default.
    pub fn describe(&self) -> String {
        let default = |d: String| self.computed.map_or(d, str::to_owned);
        let tail = match self.value {
            Value::Whole {
                default: d,
                min,
                max,
            } => {
                format!("{min}..={max}; default {}", default(d.to_string()))
            }
            Value::PowerOfTwo {
                default: d,
                min,
                max,
            } => format!(
                "a power of two, {min}..={max}; default {}",
                default(d.to_string())
            ),
            Value::Seconds {
                default: d,
                min,
                max,
            } => {
                format!("{min}..={max}; default {}", default(d.to_string()))
            }
            Value::Flag { default: d } => {
                format!("true or false; default {}", default(d.to_string()))
            }
            Value::Choice { choices } => format!(
                "{}; default {}",
                choices.join(" or "),
                default(choices.first().copied().unwrap_or_default().to_owned())
            ),
            Value::Text => format!("default {}", default("unset".to_owned())),
        };
        format!("{} ({tail})", self.meaning)
    }

    fn mistyped(&self, asked: &str) -> MachineError {
        refuse(
            self.key,
            format!("read as {asked} but declared as {:?} (a bug)", self.value),
        )
    }
}

/// `-` and digits: a number, but below zero (whole settings are unsigned).
fn is_negative_integer(v: &str) -> bool {
    v.strip_prefix('-')
        .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
}

/// Parse every setting of `specs` that is set (the generic part of a
/// [`Layer::check`](crate::Layer::check)).
///
/// # Errors
/// The first refusal.
pub fn check_declared(specs: &[SettingSpec], s: &Settings) -> Result<(), MachineError> {
    specs.iter().try_for_each(|spec| spec.check(s))
}

/// The settings of `groups` as a Markdown table (`| key | meaning |`), as README.md shows it.
pub fn markdown_table(groups: &[&[SettingSpec]]) -> String {
    let mut t = String::from("| key | meaning |\n|---|---|\n");
    for spec in groups.iter().flat_map(|g| g.iter()) {
        t += &format!("| `{}` | {} |\n", spec.key, spec.describe());
    }
    t
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
    /// const MINE: &[SettingSpec] = &[SettingSpec::whole("udp.mtu", 65535, 576, 65535, "largest packet")];
    /// let mut s = Settings::default();
    /// s.set("udp.mut", "1400");
    /// let e = s.check_known(&[MINE]).unwrap_err().to_string();
    /// assert_eq!(e, "setting udp.mut: no such setting (did you mean udp.mtu? known: udp.mtu)");
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
                let hint = crate::suggest::closest(k, names.iter().copied())
                    .map_or_else(String::new, |c| format!("did you mean {c}? "));
                Err(MachineError::Setting {
                    key: k.clone(),
                    reason: format!("no such setting ({hint}known: {})", names.join(", ")),
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
        const A: &[SettingSpec] = &[SettingSpec::text("a.x", "")];
        const B: &[SettingSpec] = &[SettingSpec::text("b.y", "")];
        let mut s = Settings::default();
        s.set("a.x", "1");
        s.set("b.y", "2");
        assert!(s.check_known(&[A, B]).is_ok());
        assert!(s.check_known(&[A]).is_err());
    }
}
