//! `tessera generate`: what a package installs beside the binary, made from the command tree
//! itself so it cannot drift from the flags: man pages (`clap_mangen`: `tessera.1` and one page
//! per command and verb, `tessera-mig-plan.1`, …) written into a folder, and shell completions
//! (`clap_complete`) for bash, zsh and fish on stdout. No logic of its own.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Command, ValueEnum};

/// What to generate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum What {
    /// Man pages, one per command and verb, into --out.
    Man,
    /// Bash completion script (stdout): install as /usr/share/bash-completion/completions/tessera.
    CompleteBash,
    /// Zsh completion script (stdout): install as /usr/share/zsh/vendor-completions/_tessera.
    CompleteZsh,
    /// Fish completion script (stdout): install as /usr/share/fish/vendor_completions.d/tessera.fish.
    CompleteFish,
}

#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// What to generate.
    #[arg(value_enum)]
    what: What,
    /// Folder for the man pages (created if absent).
    #[arg(long, value_name = "DIR", required_if_eq("what", "man"))]
    out: Option<PathBuf>,
}

/// Runs `tessera generate` over `cmd`, the whole command tree.
pub fn run(args: GenerateArgs, mut cmd: Command) -> Result<()> {
    let shell = match args.what {
        What::Man => {
            let dir = args.out.context("--out DIR is required for man pages")?;
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            cmd.build();
            let mut written = 0;
            write_pages(&cmd, "tessera", &dir, &mut written)?;
            eprintln!(
                "tessera: wrote {written} man page(s) into {}",
                dir.display()
            );
            return Ok(());
        }
        What::CompleteBash => clap_complete::Shell::Bash,
        What::CompleteZsh => clap_complete::Shell::Zsh,
        What::CompleteFish => clap_complete::Shell::Fish,
    };
    clap_complete::generate(shell, &mut cmd, "tessera", &mut std::io::stdout());
    Ok(())
}

/// The page of `cmd` (named `name`, e.g. `tessera-mig-plan`) and those of its subcommands.
fn write_pages(
    cmd: &Command,
    name: &str,
    dir: &std::path::Path,
    written: &mut usize,
) -> Result<()> {
    let page = cmd.clone().name(name.to_string());
    let path = dir.join(format!("{name}.1"));
    let mut buf = Vec::new();
    clap_mangen::Man::new(page).render(&mut buf)?;
    tessera_core::files::replace(&path, &buf)?;
    *written += 1;
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        write_pages(sub, &format!("{name}-{}", sub.get_name()), dir, written)?;
    }
    Ok(())
}
