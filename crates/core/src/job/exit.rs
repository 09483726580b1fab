//! How the user's command ended: one sentence and one exit code for every front end.

use std::process::ExitStatus;

/// The exit status when the command cannot be started, as a shell gives it.
pub const EXIT_NOT_STARTED: i32 = 127;

/// How a process ended, in words ("exited with status 1", "was ended by signal 9").
pub fn describe_status(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    if let Some(code) = status.code() {
        return format!("exited with status {code}");
    }
    match status.signal() {
        Some(signal) => format!("was ended by signal {signal}"),
        None => "ended".to_string(),
    }
}

/// "the command exited with status 3.", "the command was ended by signal 15.": the sentence
/// `run`, `sweep` and `plan --measure` say when the command ended.
pub fn ended_sentence(status: ExitStatus) -> String {
    format!("the command {}.", describe_status(status))
}

/// The command's exit code, or 128 + the signal that ended it, as a shell reports it.
pub fn exit_code_of(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    if let Some(code) = status.code() {
        return code;
    }
    status.signal().map_or(1, |signal| 128 + signal)
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;

    use super::*;

    #[test]
    fn a_code_passes_through_and_a_signal_is_128_plus_it_as_a_shell_says() {
        let exited = ExitStatus::from_raw(3 << 8);
        assert_eq!(exit_code_of(exited), 3);
        assert_eq!(ended_sentence(exited), "the command exited with status 3.");
        let terminated = ExitStatus::from_raw(15);
        assert_eq!(exit_code_of(terminated), 143);
        assert_eq!(
            ended_sentence(terminated),
            "the command was ended by signal 15."
        );
    }
}
