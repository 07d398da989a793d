//! `conv-mach`: list, show and build the named variants.
//!
//! ```text
//! conv-mach list                 the variants there are
//! conv-mach show NAME            a variant's features, default layer and settings
//! conv-mach build NAME [ARGS]    build the cargo workspace of the current directory (a
//!                                crate of one's own that depends on `converse`, or this
//!                                project) as NAME into its target/NAME/
//! ```
//!
//! The command line is clap's: `--help` (also of each command) and `--version` print to
//! stdout, exit code 0; a usage error (an unknown command or option, or a NAME that is no
//! variant, with the nearest one suggested) is one line on stderr, exit code 2, and so is a
//! variant that cannot be read. A build that fails exits with code 1.

use clap::builder::PossibleValuesParser;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use std::io::Write;
use std::process::{Command, ExitCode};

/// A line on stdout, as `println!` but never a panic: a reader gone (`conv-mach list | head
/// -1`) is its choice.
macro_rules! say_out {
    ($($t:tt)*) => {{
        let _ = writeln!(std::io::stdout().lock(), $($t)*);
    }};
}

/// A line on stderr, as `eprintln!` but never a panic (`2>/dev/full`).
macro_rules! say_err {
    ($($t:tt)*) => {{
        let _ = writeln!(std::io::stderr().lock(), $($t)*);
    }};
}

/// List, show and build the named build variants (conv-mach/variants/NAME.toml).
#[derive(Parser)]
#[command(name = "conv-mach", version, arg_required_else_help = false)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// The variants there are
    List,
    /// A variant's features, default layer and settings
    Show {
        /// The variant
        name: String,
    },
    /// Build the cargo workspace of the current directory (your crate, or this project) as
    /// variant NAME into its target/NAME/release
    Build {
        /// The variant
        // The index keeps NAME first when main gives it its possible values.
        #[arg(index = 1)]
        name: String,
        /// More arguments for `cargo build` (`-j 2`, `--offline`, ...)
        #[arg(
            index = 2,
            value_name = "CARGO-ARGS",
            trailing_var_arg = true,
            allow_hyphen_values = true
        )]
        cargo_args: Vec<String>,
    },
}

fn main() -> ExitCode {
    let dir = conv_mach::variants_dir();
    let mut command = Cli::command();
    // NAME is one of the variants there are: a wrong one is refused by clap, which lists them
    // and suggests the nearest. (A directory that cannot be listed is said by `load`.)
    if let Ok(names) = conv_mach::list(&dir) {
        for sub in ["show", "build"] {
            let names = names.clone();
            command = command.mut_subcommand(sub, |s| {
                s.mut_arg("name", |a| a.value_parser(PossibleValuesParser::new(names)))
            });
        }
    }
    let cli = match command
        .try_get_matches()
        .and_then(|m| Cli::from_arg_matches(&m))
    {
        Ok(cli) => cli,
        Err(e) => {
            let text = e.render().to_string();
            if !e.use_stderr() {
                // --help, --version: what was asked for, on stdout (a reader gone is no error).
                let _ = std::io::stdout().lock().write_all(text.as_bytes());
                return ExitCode::SUCCESS;
            }
            say_err!("{}", usage_line(&text));
            return ExitCode::from(2);
        }
    };
    match run(cli.cmd) {
        Ok(code) => code,
        Err(e) => {
            say_err!("conv-mach: {e}");
            ExitCode::from(2)
        }
    }
}

/// clap's usage error, rendered on several lines, as one line (as
/// `converse_machine::input::usage_line`, which this build tool does not depend on).
fn usage_line(rendered: &str) -> String {
    let parts: Vec<String> = rendered
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("For more information, try"))
        .map(|l| {
            let l = l.strip_prefix("error: ").unwrap_or(l);
            let l = match l.strip_prefix("Usage: ") {
                Some(usage) => format!("usage: {usage}"),
                None => l.to_owned(),
            };
            l.chars()
                .map(|c| {
                    if c.is_control() {
                        c.escape_default().to_string()
                    } else {
                        c.to_string()
                    }
                })
                .collect()
        })
        .collect();
    let mut line = String::from("conv-mach:");
    for (i, part) in parts.iter().enumerate() {
        // A list follows its heading ("not provided:", "[possible values: ...]") on the line.
        let list = i > 0 && (parts[i - 1].ends_with(':') || part.starts_with('['));
        line.push_str(if i == 0 || list { " " } else { "; " });
        line.push_str(part);
    }
    line
}

fn run(cmd: Cmd) -> Result<ExitCode, String> {
    let dir = conv_mach::variants_dir();
    match cmd {
        Cmd::List => {
            for n in conv_mach::list(&dir).map_err(|e| e.to_string())? {
                let v = conv_mach::load(&dir, &n).map_err(|e| e.to_string())?;
                say_out!("{:<14} {}", v.name, v.description);
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Show { name } => {
            let v = variant(&name)?;
            say_out!("variant  {}\n         {}", v.name, v.description);
            say_out!(
                "features {}",
                if v.features.is_empty() {
                    "(none)".into()
                } else {
                    v.features.join(", ")
                }
            );
            say_out!("machine  {}", v.machine);
            for (k, val) in &v.settings {
                say_out!("setting  {k} = {val}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Build { name, cargo_args } => {
            let v = variant(&name)?;
            let root = match workspace_here() {
                Some(r) => r,
                None => dir
                    .parent()
                    .and_then(|p| p.parent())
                    .map(std::path::Path::to_path_buf)
                    .ok_or("cannot find the workspace root")?,
            };
            let root = root.as_path();
            let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
            cmd.current_dir(root)
                .env("CONV_MACH_VARIANT", &v.name)
                .args([
                    "build",
                    "--release",
                    "--workspace",
                    "--bins",
                    "--examples",
                    "--target-dir",
                ])
                .arg(root.join("target").join(&v.name));
            if !v.features.is_empty() {
                let feats: Vec<String> =
                    v.features.iter().map(|f| format!("converse/{f}")).collect();
                cmd.arg("--features").arg(feats.join(","));
            }
            cmd.args(&cargo_args);
            say_err!(
                "conv-mach: building variant {} into target/{}/release",
                v.name,
                v.name
            );
            let status = cmd.status().map_err(|e| format!("cannot run cargo: {e}"))?;
            Ok(if status.success() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
    }
}

/// The root of the cargo workspace the current directory is in, if any: `conv-mach build`
/// builds that one (a crate of one's own that depends on `converse`, or this project), and
/// this project's only when run from outside any (an installed `conv-mach`'s own sources are
/// no place to build).
fn workspace_here() -> Option<std::path::PathBuf> {
    let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["locate-project", "--workspace", "--message-format", "plain"])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    let manifest = String::from_utf8(out.stdout).ok()?;
    std::path::Path::new(manifest.trim())
        .parent()
        .map(std::path::Path::to_path_buf)
}

fn variant(name: &str) -> Result<conv_mach::Variant, String> {
    conv_mach::load(&conv_mach::variants_dir(), name).map_err(|e| e.to_string())
}
