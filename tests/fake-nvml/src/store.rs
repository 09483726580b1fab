//! Where the state lives between calls: a locked JSON file shared by processes
//! (`FAKE_NVML_STATE`), or this process's memory.

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use gputune_core::clock::wall_clock_ms;

use crate::STATE_ENV;
use crate::codes::{Code, UNKNOWN};
use crate::state::{FakeState, parse_state};

/// The state when no file is named. Also serializes this process's threads around the file.
static MEMORY_STATE: Mutex<Option<FakeState>> = Mutex::new(None);

/// Runs `body` on the current state, advanced to the wall clock, and keeps what it changed.
/// Fails with `UNKNOWN` (and a line on stderr) when the state cannot be read or written.
pub(crate) fn with_state<T>(body: impl FnOnce(&mut FakeState) -> T) -> Result<T, Code> {
    let mut memory = MEMORY_STATE.lock().unwrap_or_else(PoisonError::into_inner);
    let result = match std::env::var_os(STATE_ENV) {
        Some(path) if !path.is_empty() => with_file_state(Path::new(&path), body),
        _ => with_memory_state(&mut memory, body),
    };
    result.map_err(|message| {
        eprintln!("fake-nvml: {message}");
        UNKNOWN
    })
}

fn with_memory_state<T>(
    memory: &mut Option<FakeState>,
    body: impl FnOnce(&mut FakeState) -> T,
) -> Result<T, String> {
    let now_ms = wall_clock_ms();
    let state = match memory.take() {
        Some(state) => memory.insert(state),
        None => memory.insert(FakeState::from_env(now_ms)?),
    };
    state.machine.advance_to(now_ms);
    Ok(body(state))
}

fn with_file_state<T>(path: &Path, body: impl FnOnce(&mut FakeState) -> T) -> Result<T, String> {
    let _lock = lock_state_file(path)?;
    let now_ms = wall_clock_ms();
    let mut state = match std::fs::read(path) {
        // A corrupt file is reported and left alone, so a test can see what broke it.
        Ok(bytes) => parse_state(&bytes).map_err(|error| format!("{}: {error}", path.display()))?,
        Err(error) if error.kind() == ErrorKind::NotFound => FakeState::from_env(now_ms)?,
        Err(error) => return Err(format!("reading {}: {error}", path.display())),
    };
    state.machine.advance_to(now_ms);
    let result = body(&mut state);
    write_atomically(path, &state)?;
    Ok(result)
}

/// An exclusive lock on `<state>.lock`, held until the returned file is dropped. A separate
/// file, because the state file itself is replaced by rename on every write.
pub(crate) fn lock_state_file(path: &Path) -> Result<File, String> {
    let lock_path = sibling(path, ".lock");
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|error| format!("opening {}: {error}", lock_path.display()))?;
    file.lock()
        .map_err(|error| format!("locking {}: {error}", lock_path.display()))?;
    Ok(file)
}

/// Writes the state to a temporary file beside `path`, then renames it over `path`, so no
/// reader ever sees half a file.
pub(crate) fn write_atomically(path: &Path, state: &FakeState) -> Result<(), String> {
    let json = serde_json::to_vec(state).map_err(|error| format!("encoding the state: {error}"))?;
    let temp_path = sibling(path, &format!(".tmp-{}", std::process::id()));
    let written = File::create(&temp_path)
        .and_then(|mut file| file.write_all(&json))
        .and_then(|()| std::fs::rename(&temp_path, path));
    written.map_err(|error| {
        let _ = std::fs::remove_file(&temp_path);
        format!("writing {}: {error}", path.display())
    })
}

/// `path` with `suffix` appended to its file name ("state.json" -> "state.json.lock").
fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = OsString::from(path.as_os_str());
    name.push(suffix);
    PathBuf::from(name)
}
