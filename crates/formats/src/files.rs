//! The engine's files: a card's journal (what puts it back) and the clock-lock record, each
//! with its format version; the older formats are read through `legacy`.

use serde::{Deserialize, Serialize};

use super::card::{BackendKind, Setting};
use super::fan_curve::FanCurve;
use super::legacy;
use super::protocol::BootDefault;
use super::temperature_hold::TemperatureHold;
use super::tuning::LockRecord;

/// Bumped when a journal's meaning changes; an unknown version is set aside, not guessed at.
/// Format 4 may name one P-state's offset (`gpu_clock_offset_at`, protocol 6); format 3
/// (protocol 5's settings, a subset) reads as it is; format 2 (older releases) is converted.
pub const JOURNAL_FORMAT: u32 = 4;

/// The clock-lock record's format: 2 writes protocol 5's style and says so; a record without
/// `format_version` (older releases; a daemon upgraded without a reboot meets one) still reads.
pub const LOCK_RECORD_FORMAT: u32 = 2;

/// What puts one GPU back as it was before gputune's temporary changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuJournal {
    pub format_version: u32,
    /// A simulated GPU's journal is never applied to a real one (and a simulated card ends with
    /// its process, so its journal is simply dropped).
    pub backend: BackendKind,
    pub uuid: String,
    /// The GPU's index when written, for messages only: the UUID finds the card.
    pub index: u32,
    /// Settings that put the card back, written in this order.
    pub restore: Vec<Setting>,
    /// Who made the changes, for messages.
    pub by: String,
    pub written_at_ms: u64,
}

/// The clock-lock record of one GPU, valid for the boot it was written in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordFile {
    pub format_version: u32,
    pub boot_id: String,
    pub locks: LockRecord,
}

/// Why a journal's bytes are not a journal this gputune can follow.
#[derive(Debug)]
pub enum JournalUnread {
    /// Not JSON, or not a journal of the format it names.
    Damaged(serde_json::Error),
    /// A format this gputune does not know (`None`: the file names none).
    UnknownFormat(Option<u64>),
}

/// A journal's bytes in today's type: format 4, or format 3 or 2 (settings in protocol 5's or
/// 4's style) converted, their offsets P0's alone (what gputune wrote then).
pub fn parse_journal(bytes: &[u8]) -> Result<GpuJournal, JournalUnread> {
    match legacy::format_version_of(bytes).map_err(JournalUnread::Damaged)? {
        Some(version) if version == u64::from(JOURNAL_FORMAT) => {
            serde_json::from_slice(bytes).map_err(JournalUnread::Damaged)
        }
        Some(3) => {
            let journal: GpuJournal =
                serde_json::from_slice(bytes).map_err(JournalUnread::Damaged)?;
            Ok(GpuJournal {
                format_version: JOURNAL_FORMAT,
                restore: p0_offsets(journal.restore),
                ..journal
            })
        }
        Some(2) => {
            let old: legacy::JournalV2 =
                serde_json::from_slice(bytes).map_err(JournalUnread::Damaged)?;
            Ok(GpuJournal {
                format_version: JOURNAL_FORMAT,
                restore: p0_offsets(old.restore()),
                backend: old.backend,
                uuid: old.uuid,
                index: old.index,
                by: old.by,
                written_at_ms: old.written_at_ms,
            })
        }
        other => Err(JournalUnread::UnknownFormat(other)),
    }
}

/// A journal before format 4 named an offset that gputune had written to P0 alone: it puts
/// back P0 alone (P2, never touched then, keeps what it has).
fn p0_offsets(settings: Vec<Setting>) -> Vec<Setting> {
    settings
        .into_iter()
        .map(|setting| match setting {
            Setting::GpuClockOffset { offset_mhz } => Setting::GpuClockOffsetAt {
                pstate: 0,
                offset_mhz,
            },
            Setting::MemoryClockOffset { offset_mhz } => Setting::MemoryClockOffsetAt {
                pstate: 0,
                offset_mhz,
            },
            other => other,
        })
        .collect()
}

/// A clock-lock record's bytes: format 2, or one without a version (protocol 4's style)
/// converted; `None` for anything else (a record only ever saves a reset, so an unreadable one
/// is simply not believed).
pub fn parse_record(bytes: &[u8]) -> Option<RecordFile> {
    match legacy::format_version_of(bytes).ok()? {
        Some(version) if version == u64::from(LOCK_RECORD_FORMAT) => {
            serde_json::from_slice(bytes).ok()
        }
        None => {
            let old: legacy::LockRecordFileV1 = serde_json::from_slice(bytes).ok()?;
            Some(RecordFile {
                format_version: LOCK_RECORD_FORMAT,
                boot_id: old.boot_id,
                locks: old.locks.into(),
            })
        }
        Some(_) => None,
    }
}

/// A boot default's file format: 2 writes protocol 5's style and says so.
pub const BOOT_DEFAULT_FORMAT: u32 = 2;

/// A boot default as its file holds it.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct BootDefaultFile {
    format_version: u32,
    gpu_uuid: String,
    profile_name: String,
    settings: Vec<Setting>,
    #[serde(default)]
    fan_curve: Option<FanCurve>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    temperature_hold: Option<TemperatureHold>,
}

impl BootDefault {
    /// Whether it holds anything to apply or keep (one that holds nothing is removed).
    pub fn holds_something(&self) -> bool {
        !self.settings.is_empty() || self.fan_curve.is_some() || self.temperature_hold.is_some()
    }

    /// The bytes of its file (`<defaults>/boot-<uuid>.json`, pretty JSON, with its
    /// `format_version`): one writer, so the golden file in tests/data/formats pins what the
    /// daemon stores.
    pub fn to_file_bytes(&self) -> Result<Vec<u8>, serde_json::Error> {
        serde_json::to_vec_pretty(&BootDefaultFile {
            format_version: BOOT_DEFAULT_FORMAT,
            gpu_uuid: self.gpu_uuid.clone(),
            profile_name: self.profile_name.clone(),
            settings: self.settings.clone(),
            fan_curve: self.fan_curve.clone(),
            temperature_hold: self.temperature_hold,
        })
    }

    /// A stored file read back: format 2, or a file without `format_version` (older releases,
    /// settings in protocol 4's style); another format is an error that names it.
    pub fn from_file_bytes(bytes: &[u8]) -> Result<BootDefault, String> {
        let text = |error: serde_json::Error| error.to_string();
        match legacy::format_version_of(bytes).map_err(text)? {
            Some(version) if version == u64::from(BOOT_DEFAULT_FORMAT) => {
                let file: BootDefaultFile = serde_json::from_slice(bytes).map_err(text)?;
                Ok(BootDefault {
                    gpu_uuid: file.gpu_uuid,
                    profile_name: file.profile_name,
                    settings: file.settings,
                    fan_curve: file.fan_curve,
                    temperature_hold: file.temperature_hold,
                })
            }
            None => {
                let old: legacy::BootDefaultV1 = serde_json::from_slice(bytes).map_err(text)?;
                Ok(BootDefault {
                    settings: old.settings(),
                    gpu_uuid: old.gpu_uuid,
                    profile_name: old.profile_name,
                    fan_curve: old.fan_curve,
                    temperature_hold: None,
                })
            }
            Some(version) => Err(format!(
                "it has format version {version}, which this gputune does not know"
            )),
        }
    }
}
