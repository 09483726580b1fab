//! Ctrl-C, SIGTERM and SIGHUP for commands that change settings for a while (`apply --try`,
//! `run`): each signal is a message on a channel, so the command ends its session the normal
//! way; past `most_signals` the process exits at once with 130 and the engine puts the cards
//! back (the daemon when the connection drops, or the next start of gputune from the journal).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{self, Receiver};

use anyhow::anyhow;

/// A channel that receives one message per signal, up to `most_signals`.
pub fn install_stop_signal(most_signals: u32) -> anyhow::Result<Receiver<()>> {
    let (sender, receiver) = mpsc::channel();
    let received = AtomicU32::new(0);
    ctrlc::set_handler(move || {
        if received.fetch_add(1, Ordering::SeqCst) >= most_signals {
            eprintln!("gputune: stopped at once; the settings are put back by the daemon, or by the next start of gputune.");
            std::process::exit(130);
        }
        // After the session no one listens, and nothing needs telling.
        let _ = sender.send(());
    })
    .map_err(|error| anyhow!("Could not install the Ctrl-C handler ({error})."))?;
    Ok(receiver)
}
