//! Named build variants, as Charm++'s `conv-mach` files name its builds (`netlrts-linux-x86_64`,
//! `multicore-linux-x86_64 smp`, ...).
//!
//! A variant is a small TOML file in `conv-mach/variants/`: the cargo features of the `converse`
//! crate it needs, the layer its programs run on by default, and the settings it changes. The
//! `conv-mach build NAME` command builds the workspace with those features into
//! `target/NAME/`, and the runtime's build script bakes the variant's name, default layer and
//! settings into every program, so a program can say what it was built as (`+version`).
//!
//! ```
//! let v = conv_mach::Variant::parse("x", r#"
//!     description = "demo"
//!     features = ["tcp"]
//!     machine = "tcp"
//!     [settings]
//!     "udp.mtu" = 1400
//! "#).unwrap();
//! assert_eq!(v.machine, "tcp");
//! assert_eq!(v.settings, [("udp.mtu".to_string(), "1400".to_string())]);
//! ```

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};

/// The variant a plain build gets.
pub const DEFAULT_VARIANT: &str = "multicore";

/// One build variant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Variant {
    /// Its name (the file name without `.toml`).
    pub name: String,
    /// One line saying what it is.
    pub description: String,
    /// Cargo features of the `converse` crate it turns on.
    pub features: Vec<String>,
    /// The layer its programs run on by default.
    pub machine: String,
    /// Default settings, sorted by name.
    pub settings: Vec<(String, String)>,
}

/// What is wrong with a variant file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VariantError {
    /// No such variant.
    #[error("no variant '{name}' (variants: {known})")]
    Unknown {
        /// The name asked for.
        name: String,
        /// The variants there are.
        known: String,
    },
    /// The file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid TOML or lacks a field.
    #[error("variant '{name}': {reason}")]
    Invalid {
        /// The variant.
        name: String,
        /// What is wrong.
        reason: String,
    },
}

/// The directory holding the variant files of this source tree.
pub fn variants_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("variants")
}

/// Names of the variants in `dir`, sorted.
///
/// # Errors
/// [`VariantError::Read`] when the directory cannot be read.
pub fn list(dir: &Path) -> Result<Vec<String>, VariantError> {
    let rd = std::fs::read_dir(dir).map_err(|source| VariantError::Read {
        path: dir.display().to_string(),
        source,
    })?;
    let mut names: Vec<String> = rd
        .filter_map(Result::ok)
        .filter_map(|e| {
            let p = e.path();
            (p.extension()? == "toml").then(|| p.file_stem()?.to_str().map(str::to_owned))?
        })
        .collect();
    names.sort();
    Ok(names)
}

/// Load variant `name` from `dir`.
///
/// # Errors
/// [`VariantError::Unknown`] when there is no such file; otherwise as [`Variant::parse`].
pub fn load(dir: &Path, name: &str) -> Result<Variant, VariantError> {
    let valid_name = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    let path = dir.join(format!("{name}.toml"));
    if !valid_name || !path.is_file() {
        return Err(VariantError::Unknown {
            name: name.into(),
            known: list(dir)?.join(", "),
        });
    }
    let text = std::fs::read_to_string(&path).map_err(|source| VariantError::Read {
        path: path.display().to_string(),
        source,
    })?;
    Variant::parse(name, &text)
}

impl Variant {
    /// Parse a variant file's text.
    ///
    /// # Errors
    /// [`VariantError::Invalid`] saying which field is missing or wrong.
    pub fn parse(name: &str, text: &str) -> Result<Variant, VariantError> {
        let bad = |reason: String| VariantError::Invalid {
            name: name.into(),
            reason,
        };
        let table: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| bad(e.to_string()))?;
        let string = |key: &str| -> Result<String, VariantError> {
            table
                .get(key)
                .and_then(toml::Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| bad(format!("'{key}' must be a string")))
        };
        let features = match table.get("features") {
            None => Vec::new(),
            Some(v) => v
                .as_array()
                .and_then(|a| a.iter().map(|f| f.as_str().map(str::to_owned)).collect())
                .ok_or_else(|| bad("'features' must be a list of strings".into()))?,
        };
        let mut settings = Vec::new();
        if let Some(s) = table.get("settings") {
            let s = s
                .as_table()
                .ok_or_else(|| bad("'settings' must be a table".into()))?;
            for (k, v) in s {
                let v = match v {
                    toml::Value::String(s) => s.clone(),
                    toml::Value::Integer(i) => i.to_string(),
                    toml::Value::Float(f) => f.to_string(),
                    toml::Value::Boolean(b) => b.to_string(),
                    _ => return Err(bad(format!("setting '{k}' must be a plain value"))),
                };
                settings.push((k.clone(), v));
            }
        }
        settings.sort();
        for key in table.keys() {
            if !["description", "features", "machine", "settings"].contains(&key.as_str()) {
                return Err(bad(format!("unknown field '{key}'")));
            }
        }
        Ok(Variant {
            name: name.into(),
            description: string("description")?,
            features,
            machine: string("machine")?,
            settings,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_variants_parse() {
        let dir = variants_dir();
        let names = list(&dir).expect("variants dir");
        assert!(names.contains(&DEFAULT_VARIANT.to_string()));
        for n in names {
            load(&dir, &n).expect("variant parses");
        }
    }

    #[test]
    fn unknown_and_malformed_variants_are_errors() {
        let dir = variants_dir();
        assert!(matches!(
            load(&dir, "nope"),
            Err(VariantError::Unknown { .. })
        ));
        assert!(matches!(
            load(&dir, "../etc"),
            Err(VariantError::Unknown { .. })
        ));
        assert!(Variant::parse("x", "machine = 3\ndescription='d'").is_err());
        assert!(Variant::parse("x", "machine = 'a'\ndescription='d'\nfeature=[]").is_err());
        assert!(Variant::parse("x", "not toml at all [").is_err());
    }
}
