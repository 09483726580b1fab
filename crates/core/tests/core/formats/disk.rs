//! The files gputune keeps: a card's journal, the clock-lock record, a boot default, profiles,
//! and the daemon's history (changes and ring file), each written by the code that writes it
//! for real where that code is public.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::values::*;
use super::{formats_dir, golden, json_lines};
use gputune_core::job_energy::store::JobStore;
use gputune_core::profiles::profile::ProfileOnCard;
use gputune_core::profiles::toml_text::{parse_profile, profile_to_toml};
use gputune_core::telemetry::store::changes::ChangeLog;
use gputune_core::telemetry::store::ring::RingFile;
use gputune_core::telemetry::store::ring::{HEADER_BYTES, RECORD_BYTES};
use gputune_core::tuning::state_folder::EngineJournal;
use gputune_core::tuning::state_folder::{StateFolder, file_safe};
use gputune_formats::card::{BackendKind, Setting};
use gputune_formats::fan_curve::CurvePoint;
use gputune_formats::files::GpuJournal;
use gputune_formats::profile::{
    BoxCard, CardIdentity, CheckRecord, CheckedBy, CheckedCard, PowerLimit, Profile,
    ProfileClockLock, SCHEMA_VERSION, Verdict,
};
use gputune_formats::protocol::BootDefault;
use gputune_formats::tuning::{ClockLockInForce, LockRecord};

pub fn read(path: &Path) -> Vec<u8> {
    match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(error) => panic!("{} could not be read: {error}", path.display()),
    }
}

/// Puts `bytes` at `path` the way gputune leaves its files: private to this user.
pub fn place(path: &Path, bytes: &[u8]) {
    let written = std::fs::write(path, bytes)
        .and_then(|()| std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)));
    if let Err(error) = written {
        panic!("{} could not be written: {error}", path.display());
    }
}

pub fn temp() -> tempfile::TempDir {
    match tempfile::tempdir() {
        Ok(dir) => dir,
        Err(error) => panic!("no temporary folder: {error}"),
    }
}

pub fn state_folder(dir: &Path) -> StateFolder {
    match StateFolder::open(&dir.join("state")) {
        Ok(folder) => folder,
        Err(error) => panic!("the state folder could not be made: {error}"),
    }
}

pub fn journal() -> GpuJournal {
    let mut journal = GpuJournal::new(
        BackendKind::Nvml,
        UUID,
        0,
        all_settings(),
        "gputune apply --try 60 (pid 4242, user alice)",
    );
    journal.written_at_ms = 1_764_000_000_000;
    journal
}

pub fn journal_path(folder: &StateFolder) -> std::path::PathBuf {
    folder
        .dir()
        .join(format!("journal-{}.json", file_safe(UUID)))
}

/// `journal` as a journal before format 4 reads today: its offsets P0's alone (all gputune
/// wrote then).
pub fn read_as_p0_offsets(mut journal: GpuJournal) -> GpuJournal {
    for setting in &mut journal.restore {
        *setting = match *setting {
            Setting::GpuClockOffset { offset_mhz } => Setting::GpuClockOffsetAt {
                pstate: 0,
                offset_mhz,
            },
            Setting::MemoryClockOffset { offset_mhz } => Setting::MemoryClockOffsetAt {
                pstate: 0,
                offset_mhz,
            },
            other => other,
        };
    }
    journal
}

/// Today's journal: every setting, one P-state's offsets (format 4) included.
pub fn journal_v4() -> GpuJournal {
    GpuJournal {
        restore: all_settings_v6(),
        ..journal()
    }
}

#[test]
fn a_journal_writes_the_bytes_of_format_4_and_reads_back() {
    let dir = temp();
    let folder = state_folder(dir.path());
    let journal = journal_v4();
    if let Err(error) = folder.write_journal(&journal) {
        panic!("the journal could not be written: {error}");
    }
    golden("journal-v4.json", &read(&journal_path(&folder)));

    let fresh = temp();
    let folder = state_folder(fresh.path());
    place(
        &journal_path(&folder),
        &read(&formats_dir().join("journal-v4.json")),
    );
    assert_eq!(folder.read_journal(UUID), Ok(Some(journal)));
}

pub const GOLDEN_BOOT_ID: &str = "BOOT-ID";

pub fn this_boot() -> String {
    String::from_utf8_lossy(&read(Path::new("/proc/sys/kernel/random/boot_id")))
        .trim()
        .to_string()
}

pub fn record_path(folder: &StateFolder) -> std::path::PathBuf {
    folder
        .record_dir()
        .join(format!("record-{}.json", file_safe(UUID)))
}

#[test]
fn a_clock_lock_record_writes_its_bytes_and_is_believed_only_in_its_boot() {
    let locks = LockRecord {
        gpu_clock_lock: ClockLockInForce::Locked {
            min_mhz: 210,
            max_mhz: 2520,
        },
        memory_clock_lock: ClockLockInForce::Unlocked,
    };
    let dir = temp();
    let folder = state_folder(dir.path());
    if let Err(error) = folder.write_locks(UUID, locks) {
        panic!("the record could not be written: {error}");
    }
    let written = String::from_utf8_lossy(&read(&record_path(&folder))).to_string();
    // The boot's id differs on every machine: the golden file names it BOOT-ID.
    let boot = this_boot();
    assert!(written.contains(&boot), "{written}");
    golden(
        "clock-lock-record.json",
        written.replace(&boot, GOLDEN_BOOT_ID).as_bytes(),
    );

    let golden_text =
        String::from_utf8_lossy(&read(&formats_dir().join("clock-lock-record.json"))).to_string();
    let fresh = temp();
    let folder = state_folder(fresh.path());
    place(
        &record_path(&folder),
        golden_text.replace(GOLDEN_BOOT_ID, &boot).as_bytes(),
    );
    assert_eq!(folder.read_locks(UUID), Some(locks));
    place(&record_path(&folder), golden_text.as_bytes());
    assert_eq!(folder.read_locks(UUID), None, "a record of another boot");
}

#[test]
fn a_boot_default_writes_its_bytes_and_reads_back() {
    // What the daemon stores in /var/lib/gputune/defaults/boot-<uuid>.json.
    let default = boot_default();
    match default.to_file_bytes() {
        Ok(bytes) => golden("boot-default.json", &bytes),
        Err(error) => panic!("the boot default does not serialize: {error}"),
    }
    let read = BootDefault::from_file_bytes(&read(&formats_dir().join("boot-default.json")))
        .map_err(|error| error.to_string());
    assert_eq!(read, Ok(default));
}

#[test]
fn a_job_record_writes_the_bytes_of_format_1_and_reads_back() {
    // What the daemon keeps in /var/lib/gputune/jobs/ when a job ends.
    let dir = temp();
    let store = JobStore::new(dir.path().join("jobs"));
    let path = match store.write(&job_record()) {
        Ok(path) => path,
        Err(error) => panic!("the job record could not be written: {error}"),
    };
    golden("job-record-v1.json", &read(&path));
    place(&path, &read(&formats_dir().join("job-record-v1.json")));
    let read_back = store.newest(10);
    assert_eq!(read_back.skipped, Vec::<String>::new());
    assert_eq!(read_back.records, vec![job_record()]);
}

pub fn profile(last_check: bool) -> Profile {
    Profile {
        schema_version: SCHEMA_VERSION,
        name: "Quiet".to_string(),
        notes: "Cooler nights.\nSecond line.".to_string(),
        card: CardIdentity {
            uuid: UUID.to_string(),
            name: "NVIDIA GeForce RTX 4090".to_string(),
            pci_bus_id: "00000000:01:00.0".to_string(),
        },
        default_for_card: true,
        power_limit: Some(PowerLimit {
            percent_of_default: 70.0,
            watts: 315.0,
        }),
        gpu_clock_lock: Some(ProfileClockLock {
            min_mhz: 210,
            max_mhz: 2520,
        }),
        memory_clock_lock: None,
        gpu_clock_offset_mhz: Some(-150),
        memory_clock_offset_mhz: Some(500),
        fan_curve: Some(vec![
            CurvePoint {
                temperature_c: 40.0,
                speed_pct: 30.0,
            },
            CurvePoint {
                temperature_c: 85.0,
                speed_pct: 100.0,
            },
        ]),
        last_check: last_check.then(|| CheckRecord {
            ended_at_ms: 1_764_000_600_000,
            ran_s: 600.0,
            verdict: Verdict::Stable,
            summary: "Stable: 10 min, 0 errors in 1.2 TB checked.".to_string(),
            driver_version: Some("580.65.06".to_string()),
            gputune_version: "0.9.0".to_string(),
            gpu_uuid: Some(UUID.to_string()),
            gpu_name: Some("NVIDIA GeForce RTX 4090".to_string()),
        }),
        checked_cards: Vec::new(),
        box_cards: Vec::new(),
    }
}

#[test]
fn profiles_write_the_bytes_of_schema_1_with_and_without_a_last_check_and_read_back() {
    for (name, with_check) in [
        ("profile-v1.toml", false),
        ("profile-v1-last-check.toml", true),
    ] {
        let profile = profile(with_check);
        let text = match profile_to_toml(&profile) {
            Ok(text) => text,
            Err(error) => panic!("the profile does not serialize: {error}"),
        };
        golden(name, text.as_bytes());
        let read = parse_profile(&read(&formats_dir().join(name)));
        assert_eq!(read, Ok(profile), "{name}");
    }
}

/// A profile with each card's own checked offsets (`[[checked_cards]]`, added with a serde
/// default: the two files above, which have none, read unchanged).
#[test]
fn a_profile_with_checked_cards_writes_its_bytes_and_reads_back() {
    let mut profile = profile(true);
    profile.checked_cards = vec![
        CheckedCard {
            gpu_uuid: UUID.to_string(),
            gpu_name: "NVIDIA GeForce RTX 4090".to_string(),
            gpu_clock_offset_mhz: Some(-150),
            memory_clock_offset_mhz: Some(500),
            checked_at_ms: 1_764_000_600_000,
            ran_s: 600.0,
            by: CheckedBy::Check,
            verdict: Verdict::Stable,
        },
        CheckedCard {
            gpu_uuid: "GPU-5a1e0c2d-0000-4000-8000-000000000004".to_string(),
            gpu_name: "NVIDIA GeForce RTX 4090".to_string(),
            gpu_clock_offset_mhz: Some(-90),
            memory_clock_offset_mhz: None,
            checked_at_ms: 1_764_100_000_000,
            ran_s: 600.0,
            by: CheckedBy::Scan,
            verdict: Verdict::Stable,
        },
    ];
    let text = match profile_to_toml(&profile) {
        Ok(text) => text,
        Err(error) => panic!("the profile does not serialize: {error}"),
    };
    golden("profile-v1-checked-cards.toml", text.as_bytes());
    let read = parse_profile(&read(&formats_dir().join("profile-v1-checked-cards.toml")));
    assert_eq!(read, Ok(profile));
}

/// A profile's check as 8ab058c wrote it, without the card it was made on
/// (`tests/data/formats/8ab058c/`): it reads, with the card unknown, and counts on no card.
#[test]
fn a_last_check_of_8ab058c_reads_as_made_on_an_unknown_card() {
    let old = match parse_profile(&read(
        &formats_dir().join("8ab058c/profile-v1-last-check.toml"),
    )) {
        Ok(profile) => profile,
        Err(problem) => panic!("the 8ab058c profile does not read: {problem:?}"),
    };
    let mut expected = profile(true);
    if let Some(record) = expected.last_check.as_mut() {
        record.gpu_uuid = None;
        record.gpu_name = None;
    }
    assert_eq!(old, expected);
    let record = old
        .last_check
        .as_ref()
        .expect("the old profile has its check");
    assert!(!record.counts_on(UUID));
    assert!(
        old.check_text().contains("counts as checked on no card"),
        "{}",
        old.check_text()
    );
}

#[test]
fn the_history_changes_write_one_json_line_each_and_read_back() {
    let notes = vec![change_note(1_764_000_000_000), {
        let mut note = change_note(1_764_000_060_000);
        note.by = "another program".to_string();
        note.what = "fan 0 automatic".to_string();
        note
    }];
    let dir = temp();
    let path = dir.path().join("changes.jsonl");
    let (mut log, problem) = ChangeLog::open(&path);
    assert_eq!(problem, None);
    for note in &notes {
        if let Err(error) = log.append_if_new(note) {
            panic!("a change could not be written: {error}");
        }
    }
    let written = read(&path);
    assert_eq!(written, json_lines(&notes).into_bytes());
    golden("history-changes.jsonl", &written);

    let fresh = temp();
    let path = fresh.path().join("changes.jsonl");
    place(&path, &read(&formats_dir().join("history-changes.jsonl")));
    let (log, problem) = ChangeLog::open(&path);
    assert_eq!(problem, None);
    assert_eq!(log.between(0, u64::MAX), notes);
}

const RING_CAPACITY_S: u64 = 4;

#[test]
fn the_history_ring_writes_its_header_and_40_byte_records_and_reads_back() {
    let rows = history_rows();
    let dir = temp();
    let path = dir.path().join("ring");
    let ring = match RingFile::open(&path, RING_CAPACITY_S) {
        Ok((ring, _)) => ring,
        Err(error) => panic!("the ring could not be made: {error}"),
    };
    for row in &rows {
        if let Err(error) = ring.write(row) {
            panic!("a row could not be written: {error}");
        }
    }
    let bytes = read(&path);
    // The layout, said once more by hand: magic, version 1, record size, capacity, then one
    // 40-byte record a second at slot (second % capacity), each starting with its time (ms).
    assert_eq!(&bytes[..16], b"gputune history\n");
    assert_eq!(bytes[16..20], 1u32.to_le_bytes());
    assert_eq!(bytes[20..24], (RECORD_BYTES as u32).to_le_bytes());
    assert_eq!(bytes[24..32], RING_CAPACITY_S.to_le_bytes());
    let first_slot = (rows[0].time_ms / 1000 % RING_CAPACITY_S) as usize;
    let at = HEADER_BYTES as usize + first_slot * RECORD_BYTES;
    assert_eq!(bytes[at..at + 8], rows[0].time_ms.to_le_bytes());
    golden("history-ring-v1.bin", &bytes);

    let fresh = temp();
    let path = fresh.path().join("ring");
    place(&path, &read(&formats_dir().join("history-ring-v1.bin")));
    let (ring, notice) = match RingFile::open(&path, RING_CAPACITY_S) {
        Ok(opened) => opened,
        Err(error) => panic!("the golden ring could not be opened: {error}"),
    };
    assert_eq!(notice, None, "the golden ring's header is refused");
    let seconds = rows[0].time_ms / 1000..=rows[rows.len() - 1].time_ms / 1000;
    assert_eq!(ring.read(*seconds.start(), *seconds.end()).ok(), Some(rows));
}

#[test]
fn a_box_profile_writes_its_bytes_and_reads_back() {
    let mut profile = profile(false);
    profile.box_cards = vec![
        BoxCard {
            gpu_uuid: UUID.to_string(),
            gpu_name: "NVIDIA GeForce RTX 4090".to_string(),
            power_limit: None,
        },
        BoxCard {
            gpu_uuid: "GPU-5a1e0c2d-0000-4000-8000-000000000004".to_string(),
            gpu_name: "NVIDIA GeForce RTX 4090".to_string(),
            power_limit: Some(PowerLimit {
                percent_of_default: 70.0,
                watts: 315.0,
            }),
        },
    ];
    let text = match profile_to_toml(&profile) {
        Ok(text) => text,
        Err(error) => panic!("the profile does not serialize: {error}"),
    };
    golden("profile-v1-box-cards.toml", text.as_bytes());
    let read = parse_profile(&read(&formats_dir().join("profile-v1-box-cards.toml")));
    assert_eq!(read, Ok(profile));
}
