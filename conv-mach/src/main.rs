//! `conv-mach`: list, show and build the named variants.
//!
//! ```text
//! conv-mach list                 the variants there are
//! conv-mach show NAME            a variant's features, default layer and settings
//! conv-mach build NAME [ARGS]    build the workspace as NAME into target/NAME/
//! ```

use std::process::{Command, ExitCode};

const USAGE: &str = "usage: conv-mach list | show NAME | build NAME [CARGO-ARGS...]";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // As every tool of the project (`converse_machine::input::help_or_version`, which this
    // build tool does not depend on): a lone --help or --version to stdout, exit 0.
    match args.first().map(String::as_str) {
        Some("--help" | "-h") => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Some("--version" | "-V") => {
            println!("conv-mach {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        _ => {}
    }
    match run(&args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("conv-mach: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(args: &[String]) -> Result<ExitCode, String> {
    let dir = conv_mach::variants_dir();
    match args.first().map(String::as_str) {
        Some("list") => {
            for n in conv_mach::list(&dir).map_err(|e| e.to_string())? {
                let v = conv_mach::load(&dir, &n).map_err(|e| e.to_string())?;
                println!("{:<14} {}", v.name, v.description);
            }
            Ok(ExitCode::SUCCESS)
        }
        Some("show") => {
            let v = variant(args)?;
            println!("variant  {}\n         {}", v.name, v.description);
            println!(
                "features {}",
                if v.features.is_empty() {
                    "(none)".into()
                } else {
                    v.features.join(", ")
                }
            );
            println!("machine  {}", v.machine);
            for (k, val) in &v.settings {
                println!("setting  {k} = {val}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Some("build") => {
            let v = variant(args)?;
            let root = dir
                .parent()
                .and_then(|p| p.parent())
                .ok_or("cannot find the workspace root")?;
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
            cmd.args(&args[2..]);
            eprintln!(
                "conv-mach: building variant {} into target/{}/release",
                v.name, v.name
            );
            let status = cmd.status().map_err(|e| format!("cannot run cargo: {e}"))?;
            Ok(if status.success() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        _ => Err(USAGE.into()),
    }
}

fn variant(args: &[String]) -> Result<conv_mach::Variant, String> {
    let name = args.get(1).ok_or(USAGE)?;
    conv_mach::load(&conv_mach::variants_dir(), name).map_err(|e| e.to_string())
}
