//! `gputune links`: every card's PCIe link under load and its host copies, every pair's
//! topology, P2P status and card-to-card copy, each copy checked bit for bit (the engine is
//! `pcie::test_links`); a table, then what it means for a data-parallel job. It changes no
//! setting, so it holds no engine session: it reads the cards here, as `status` does.
//!
//! Exit status: 0 every copy right, 1 a copy came back wrong, 2 could not test.

use std::io::{IsTerminal, Write};
use std::ops::ControlFlow;

use anyhow::bail;
use clap::Args;

use crate::cli::connect::choose_listed_gpus;
use crate::device::{Backend, BackendOptions, open_backend};
use crate::pcie::busy::{self, busy_cards};
use crate::pcie::{LinksOptions, LinksProgress, test_links};
use gputune_formats::reports::links::{LinksOutcome, LinksReport};

mod table;

/// The largest copy: the pattern numbers 32-bit words, and 4 GiB is far past what a copy's
/// rate needs.
const MOST_MIB: u64 = 4096;

#[derive(Debug, Clone, Args)]
pub struct LinksArgs {
    /// The GPUs: an index or UUID, several separated by commas, or `all` (the default).
    #[arg(long)]
    pub gpu: Option<String>,
    /// Print the report as JSON on standard output.
    #[arg(long)]
    pub json: bool,
    /// MiB of each copy (256 by default: about 10 ms on Gen 4 x16).
    #[arg(long, default_value_t = 256)]
    pub size_mib: u64,
    /// Test even beside other programs computing on a card (they share the bus: the rates
    /// measure both).
    #[arg(long)]
    pub force: bool,
}

/// Runs `gputune links`; the exit status (0, 1, 2).
pub fn run_command(args: &LinksArgs, options: &BackendOptions) -> anyhow::Result<i32> {
    if args.size_mib == 0 || args.size_mib > MOST_MIB {
        bail!(
            "--size-mib {}: a copy is 1 to {MOST_MIB} MiB. Nothing was tested.",
            args.size_mib
        );
    }
    let opened = open_backend(options)?;
    if let Some(reason) = &opened.fallback_reason {
        bail!(
            "There is no NVIDIA GPU to test ({reason}); add --backend sim to use the simulated GPUs."
        );
    }
    let mut backend = opened.backend;
    let uuids = (0..backend.gpu_count()?)
        .map(|index| backend.identity(index).map(|identity| identity.uuid))
        .collect::<Result<Vec<_>, _>>()?;
    let gpus = choose_listed_gpus(&uuids, args.gpu.as_deref().unwrap_or("all"))?;
    let mut messages = std::io::stderr();
    refuse_busy_cards(backend.as_mut(), &gpus, args.force, &mut messages)?;
    let test_options = LinksOptions {
        size_bytes: args.size_mib << 20,
        ..LinksOptions::default()
    };
    let show_progress = messages.is_terminal() && !args.json;
    let report = test_links(
        backend.as_mut(),
        &gpus,
        &test_options,
        &mut |step: &LinksProgress| {
            if show_progress && step.done < step.total {
                let _ = write!(
                    messages,
                    "\rgputune: testing {} ({} of {})…\x1b[K",
                    step.doing,
                    step.done + 1,
                    step.total
                );
            }
            // Seconds in all: Ctrl-C ends the command as it would any program.
            ControlFlow::Continue(())
        },
    );
    if show_progress {
        let _ = write!(messages, "\r\x1b[K");
    }
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if args.json {
        crate::text::write_json_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        table::print(&mut out, &report)?;
    }
    Ok(exit_status(&report))
}

/// 0 every copy right, 1 one came back wrong, 2 something could not be tested.
pub fn exit_status(report: &LinksReport) -> i32 {
    match report.outcome {
        LinksOutcome::AllRight => 0,
        LinksOutcome::WrongData => 1,
        LinksOutcome::NotTested => 2,
    }
}

/// Other programs computing on a card share its bus: the rates would measure both. Refused
/// unless `force`, then said.
fn refuse_busy_cards(
    backend: &mut dyn Backend,
    gpus: &[u32],
    force: bool,
    messages: &mut dyn Write,
) -> anyhow::Result<()> {
    for card in busy_cards(backend, gpus)? {
        if !force {
            bail!(
                "{}",
                busy::refusal(&card, ", or test beside them with --force")
            );
        }
        writeln!(messages, "gputune: warning: {}", busy::warning(&card))?;
    }
    Ok(())
}
