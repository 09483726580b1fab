//! The box-check journal: a session of purpose `box_check` (every card loaded at once, in
//! phase) is written down (`box-check.json`) before the load starts and updated with the box's
//! power about once a second; its normal end removes it. It lives where a power cut leaves it:
//! the daemon's in `/var/lib/gputune/box-check` (not `/run`, emptied at boot), an engine's
//! without the daemon in its state folder (`EngineOptions::box_journal_dir`). The side that
//! survives writes it: the engine (the daemon's, as root), not the checking client. A journal
//! found at the engine's start means the machine went down mid-check, most likely its power
//! supply: said to every client (the welcome's notices), by `gputune status`, and in the log,
//! then moved aside (`box-check.json.went-down-<ms>`), never read twice. A file there that is not
//! a journal of ours (damaged, huge, a symbolic link, another user's) is moved aside unread.
//! One box check is journaled at a time: the check holds `box-check.lock` (a `flock`, which
//! dies with its process) for its life, and a journal is acted on only when that lock is free,
//! so a second gputune never takes a live check's journal for a left one.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::Engine;
use crate::fsafe;
use crate::tuning::gpu_locks::{GpuLock, LockRefused, try_lock_file};
use gputune_formats::card::{DeviceError, Telemetry};
use gputune_formats::reports::box_check::{BOX_JOURNAL_FORMAT, BoxJournal};
use gputune_formats::tuning::{Notice, SessionId, TuneError, TuneErrorKind};

/// The journal's name in its folder.
pub const BOX_JOURNAL_FILE: &str = "box-check.json";
/// The lock a box check holds for its life, beside the journal.
const BOX_LOCK_FILE: &str = "box-check.lock";
/// How often the journal takes the box's power.
const UPDATE_EVERY: Duration = Duration::from_secs(1);
/// A real journal is a few hundred bytes; eight cards' UUIDs under 1 KiB.
const MOST_BYTES: u64 = 64 * 1024;
/// More cards than any box has.
const MOST_CARDS: usize = 64;
/// Every notice about a box that went down begins so (`gputune status` shows these).
pub const WENT_DOWN: &str = "The box went down";

/// The box check the engine journals now.
#[derive(Debug)]
pub(super) struct BoxCheckKept {
    session: SessionId,
    indices: Vec<u32>,
    journal: BoxJournal,
    written: Instant,
    /// Held for the check's life: no other box check, and no one takes the journal for left.
    _lock: GpuLock,
}

impl Engine {
    fn box_journal_path(&self) -> PathBuf {
        self.box_folder.join(BOX_JOURNAL_FILE)
    }

    /// A box check is refused while one is journaled: one journal, one check (a second
    /// check's end would remove the first one's journal). The refusal names who runs it.
    pub(super) fn check_box_check_free(&self) -> Result<(), TuneError> {
        let Some(kept) = &self.box_check else {
            return Ok(());
        };
        let who = self.sessions.get(&kept.session).map_or_else(
            || "another client".to_string(),
            |session| session.client.describe(),
        );
        Err(box_check_running(&who))
    }

    /// The box check's lock, taken for `holder`; a refusal says who holds it or what is wrong
    /// with the file.
    fn lock_box_check(&self, holder: &str) -> Result<GpuLock, TuneError> {
        // Checked at every check, not only at start: a folder swapped for a link since is
        // never written through.
        fsafe::check_private_folder(&self.box_folder).map_err(|error| {
            TuneError::new(
                TuneErrorKind::State,
                format!("The box check cannot be journaled, so it did not start: {error}"),
            )
        })?;
        try_lock_file(&self.box_folder.join(BOX_LOCK_FILE), holder).map_err(|refused| match refused {
            LockRefused::Held { holder } => box_check_running(&holder),
            LockRefused::Unusable { problem } => TuneError::new(
                TuneErrorKind::State,
                format!("The box check cannot be journaled, so it did not start: {problem} Remove that file when no gputune runs, then try again."),
            ),
        })
    }

    /// Session `id`, a box check on the cards `indices`, is about to load them: its journal is
    /// written first. An error when it cannot be (the check must not run unjournaled).
    pub(super) fn box_check_started(
        &mut self,
        id: SessionId,
        indices: &[u32],
        clock_cap_mhz: Option<u32>,
    ) -> Result<(), TuneError> {
        let holder = self.sessions.get(&id).map_or_else(
            || "a box check".to_string(),
            |session| session.client.describe(),
        );
        let lock = self.lock_box_check(&holder)?;
        // A journal here between checks was kept by an earlier check of this engine whose cards
        // were lost while the machine stayed up (its report said so): moved aside with its
        // record, never written over by this one.
        let path = self.box_journal_path();
        if std::fs::symlink_metadata(&path).is_ok() {
            let aside = set_aside(&path, "cards-lost");
            tracing::warn!(
                "an earlier box check's journal (its cards were lost) was there: {aside}"
            );
        }
        let now_ms = self.clock.now_ms();
        let journal = BoxJournal {
            format_version: BOX_JOURNAL_FORMAT,
            gpu_uuids: indices
                .iter()
                .map(|index| self.gpu(*index).info.identity.uuid.clone())
                .collect(),
            started_at_ms: now_ms,
            updated_at_ms: now_ms,
            box_power_w: None,
            box_power_peak_w: None,
            clock_max_mhz: None,
            clock_cap_mhz,
            boot_id: crate::tuning::state_folder::boot_id(),
            cards_lost: Vec::new(),
        };
        write(&self.box_journal_path(), &journal).map_err(|error| {
            TuneError::new(
                TuneErrorKind::State,
                format!("The box check's journal could not be written, so the check did not start (a machine going down could not be said afterwards): {error}"),
            )
        })?;
        self.box_check = Some(BoxCheckKept {
            session: id,
            indices: indices.to_vec(),
            journal,
            written: self.clock.now(),
            _lock: lock,
        });
        Ok(())
    }

    /// Session `id` now holds the clock cap `cap_mhz` (a rerun of a failing step): if it is the
    /// box check journaled, its journal says so at once.
    pub(super) fn box_check_cap(&mut self, id: SessionId, cap_mhz: Option<u32>) {
        let path = self.box_journal_path();
        let now_ms = self.clock.now_ms();
        let Some(kept) = self
            .box_check
            .as_mut()
            .filter(|kept| kept.session == id && cap_mhz.is_some())
        else {
            return;
        };
        kept.journal.clock_cap_mhz = cap_mhz;
        // The clocks from here on are the cap's: a trip under it is worked out from them.
        kept.journal.clock_max_mhz = None;
        kept.journal.updated_at_ms = now_ms;
        if let Err(error) = write(&path, &kept.journal) {
            tracing::warn!("the box check's journal could not be updated: {error}");
        }
    }

    /// A round of readings: the journal takes the box's power (its cards' sum) and the highest
    /// clock, at most once a second.
    pub(super) fn box_check_readings(&mut self, readings: &[Result<Telemetry, DeviceError>]) {
        let now = self.clock.now();
        let now_ms = self.clock.now_ms();
        let path = self.box_journal_path();
        let Some(kept) = &mut self.box_check else {
            return;
        };
        let cards: Vec<&Telemetry> = kept
            .indices
            .iter()
            .filter_map(|index| readings.get(*index as usize)?.as_ref().ok())
            .collect();
        if cards.len() == kept.indices.len() {
            let watts: f64 = cards
                .iter()
                .filter_map(|reading| reading.power_draw_mw)
                .map(|mw| f64::from(mw) / 1000.0)
                .sum();
            let journal = &mut kept.journal;
            journal.box_power_w = Some(watts);
            journal.box_power_peak_w = Some(
                journal
                    .box_power_peak_w
                    .map_or(watts, |peak| peak.max(watts)),
            );
            let clock = cards
                .iter()
                .filter_map(|reading| reading.sm_clock_mhz.or(reading.gpu_clock_mhz))
                .max();
            journal.clock_max_mhz = journal.clock_max_mhz.max(clock);
        }
        if now.duration_since(kept.written) < UPDATE_EVERY {
            return;
        }
        kept.journal.updated_at_ms = now_ms;
        kept.written = now;
        if let Err(error) = write(&path, &kept.journal) {
            tracing::warn!("the box check's journal could not be updated: {error}");
        }
    }

    /// Session `id` ended: a box check's journal goes, unless a card of it is lost (the machine
    /// may be going down: the journal stays for the next start to say).
    pub(super) fn box_check_ended(&mut self, id: SessionId) {
        if self
            .box_check
            .as_ref()
            .is_none_or(|kept| kept.session != id)
        {
            return;
        }
        let Some(mut kept) = self.box_check.take() else {
            return;
        };
        let lost: Vec<String> = kept
            .indices
            .iter()
            .filter(|index| self.gpu(**index).lost.is_some())
            .map(|index| self.gpu(*index).info.identity.uuid.clone())
            .collect();
        if !lost.is_empty() {
            // Kept, and why: the next start says lost cards, not a process that died.
            kept.journal.cards_lost = lost;
            if let Err(error) = write(&self.box_journal_path(), &kept.journal) {
                tracing::warn!("the box check's journal could not be updated: {error}");
            }
            tracing::error!(
                "cards were lost during a box check: its journal is kept for the next start"
            );
            return;
        }
        // The machine stayed up through a box check: an older "went down" is news no longer.
        self.box_check_ended_up = true;
        match std::fs::remove_file(self.box_journal_path()) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => tracing::warn!("the box check's journal could not be removed: {error}"),
        }
    }

    /// Whether a box check ended with the machine up since the last call: the service then
    /// drops the "went down" notice of its start from its welcome.
    pub fn take_box_check_ended(&mut self) -> bool {
        std::mem::take(&mut self.box_check_ended_up)
    }

    /// At start: a box-check journal left behind means the machine went down mid-check. Its
    /// notice (logged too), the journal moved aside.
    pub(super) fn box_check_left(&mut self) -> Option<Notice> {
        let path = self.box_journal_path();
        // A folder that is not ours (a link, another user's) is never read nor written through;
        // the engine's start said so already.
        if fsafe::check_private_folder(&self.box_folder).is_err()
            || std::fs::symlink_metadata(&path)
                .is_err_and(|error| error.kind() == std::io::ErrorKind::NotFound)
        {
            return None;
        }
        let reader = format!(
            "gputune (pid {}, reading a box-check journal)",
            std::process::id()
        );
        let _lock = match try_lock_file(&self.box_folder.join(BOX_LOCK_FILE), &reader) {
            Ok(lock) => lock,
            // A check runs now (another gputune's): the journal is its own, not a left one.
            Err(LockRefused::Held { .. }) => return None,
            Err(LockRefused::Unusable { problem }) => {
                let notice = format!(
                    "A box-check journal is in {}, but it was not looked at: {problem} Remove that file when no gputune runs.",
                    crate::text::path(&self.box_folder)
                );
                tracing::warn!("{notice}");
                return Some(Notice::Warning(notice));
            }
        };
        let journal = match read(&path) {
            Ok(Some(journal)) => journal,
            Ok(None) => return None,
            Err(why) => {
                let aside = set_aside(&path, "unreadable");
                // The why can quote the file (serde names an unknown field): escaped, cut short.
                let why = crate::text::printable(&why.chars().take(400).collect::<String>());
                let notice = format!(
                    "A box-check journal in {} could not be used ({why}); {aside}.",
                    crate::text::path(&self.box_folder)
                );
                tracing::warn!("{notice}");
                return Some(Notice::Warning(notice));
            }
        };
        let gpus = self.named_gpus(&journal.gpu_uuids);
        let same_boot =
            journal.boot_id.is_some() && journal.boot_id == crate::tuning::state_folder::boot_id();
        let into = gputune_formats::units::duration_s(
            journal.updated_at_ms.saturating_sub(journal.started_at_ms) as f64 / 1000.0,
        );
        if same_boot && !journal.cards_lost.is_empty() {
            // The machine stayed up, but cards of the check stopped answering.
            let aside = set_aside(&path, "cards-lost");
            let notice = format!(
                "A box check of {} lost {} {into} in (fallen off the bus or not answering), and the machine did not go down (this is the same boot): check those cards' power cables and seating, and the kernel log for Xid 79. ({aside}.)",
                gpus.join(", "),
                self.named_gpus(&journal.cards_lost).join(", "),
            );
            tracing::error!("{notice}");
            return Some(Notice::Error(notice));
        }
        if same_boot {
            // The machine stayed up: the process that held the check died (kill -9, a crash).
            let aside = set_aside(&path, "ended");
            let notice = format!(
                "A box check of {} ended without finishing {into} in, and the machine did not go down (this is the same boot): the gputune that ran it died. ({aside}.)",
                gpus.join(", "),
            );
            tracing::warn!("{notice}");
            return Some(Notice::Warning(notice));
        }
        let sentence = journal.went_down_sentence(&gpus.join(", "));
        let aside = set_aside(&path, "went-down");
        // When: the journal's last update, at most a second before the machine went down.
        let at = gputune_formats::units::local_time(journal.updated_at_ms, "%-d %b %Y %H:%M:%S");
        let notice = format!("{sentence} (It went down at about {at}; {aside}.)");
        tracing::error!("{notice}");
        Some(Notice::Error(notice))
    }
}

impl Engine {
    /// "GPU 3" for each card of `uuids` here; a UUID not here as read (escaped, cut short).
    fn named_gpus(&self, uuids: &[String]) -> Vec<String> {
        uuids
            .iter()
            .map(|uuid| match self.index_of(uuid) {
                Ok(index) => format!("GPU {index}"),
                Err(_) => crate::text::printable(&uuid.chars().take(96).collect::<String>()),
            })
            .collect()
    }
}

fn box_check_running(who: &str) -> TuneError {
    TuneError::new(
        TuneErrorKind::Held,
        format!(
            "A box check is running already, by {who}: one box check runs at a time (its journal is what says a machine that goes down); try again when it has ended."
        ),
    )
}

fn write(path: &Path, journal: &BoxJournal) -> Result<(), fsafe::FileError> {
    let text = serde_json::to_vec_pretty(journal).map_err(|error| fsafe::FileError::Write {
        path: path.to_path_buf(),
        detail: error.to_string(),
    })?;
    fsafe::write_atomically(path, &text, 0o600)
}

/// The journal at `path`: `None` when there is none; an error (to set it aside) when it is not a
/// journal this engine wrote (a symbolic link, another user's or a hard-linked file, a FIFO, a
/// huge or damaged file, another format).
fn read(path: &Path) -> Result<Option<BoxJournal>, String> {
    let bytes = match fsafe::read_private(path, MOST_BYTES) {
        Ok(bytes) => bytes,
        Err(error) if error.is_not_found() => return Ok(None),
        Err(error) => return Err(error.to_string()),
    };
    let journal: BoxJournal =
        serde_json::from_slice(&bytes).map_err(|error| format!("it is damaged: {error}"))?;
    if journal.format_version != BOX_JOURNAL_FORMAT {
        return Err(format!(
            "it has format version {}, which this gputune does not know",
            journal.format_version
        ));
    }
    let named = journal.gpu_uuids.len().max(journal.cards_lost.len());
    if named > MOST_CARDS {
        return Err(format!("it names {named} cards, more than a box has"));
    }
    Ok(Some(journal))
}

/// Renames `path` (a link itself, never its target) to `<name>.<why>-<ms>`; says where.
fn set_aside(path: &Path, why: &str) -> String {
    let aside = path.with_extension(format!("json.{why}-{}", crate::clock::wall_clock_ms()));
    match std::fs::rename(path, &aside) {
        Ok(()) => format!("it was moved to {}", crate::text::path(&aside)),
        Err(error) => format!("it could not be moved aside either ({error})"),
    }
}
