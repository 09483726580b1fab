//! A profile file's text: TOML bytes to a checked `Profile` (bounded in size and nesting, a
//! known schema version, every field checked; never a panic, whatever the bytes) and a
//! `Profile` to the commented TOML gputune writes. Reading and writing one file is
//! `profile_file.rs`; the folder of profiles (list, default per card, import) is `store.rs`.

use crate::profiles::profile::ProfileOnCard;
use crate::text;
use gputune_formats::profile::{Profile, SCHEMA_VERSION};

/// The largest profile file read. A real one is about a kilobyte; anything far bigger is not a
/// profile, and reading it whole would only cost memory.
pub const MAX_FILE_BYTES: u64 = 64 * 1024;
/// The deepest nesting of tables and arrays a profile file may have (a real one has 2).
const MAX_NESTING: usize = 8;

/// What is wrong with a profile's text, before it is tied to a file.
#[derive(Debug, Clone, PartialEq)]
pub enum ParseProblem {
    Corrupt(String),
    FutureVersion(i64),
    Invalid(String),
}

/// Parses a profile file's bytes: UTF-8, TOML, a known schema version, every field checked.
/// Never panics, whatever the bytes (a property test feeds it random and mutated files).
pub fn parse_profile(content: &[u8]) -> Result<Profile, ParseProblem> {
    if content.len() as u64 > MAX_FILE_BYTES {
        return Err(ParseProblem::Corrupt(format!(
            "larger than {MAX_FILE_BYTES} bytes"
        )));
    }
    let text = std::str::from_utf8(content)
        .map_err(|error| ParseProblem::Corrupt(format!("not UTF-8 text: {error}")))?;
    if nesting_depth(text) > MAX_NESTING {
        return Err(ParseProblem::Corrupt(format!(
            "tables or arrays nested deeper than {MAX_NESTING} levels"
        )));
    }
    let table: toml::Table = toml::from_str(text)
        .map_err(|error| ParseProblem::Corrupt(one_line(&error.to_string())))?;
    match table.get("schema_version") {
        None => {
            return Err(ParseProblem::Corrupt(
                "no schema_version: it is not a gputune profile".to_string(),
            ));
        }
        Some(toml::Value::Integer(version)) if *version > i64::from(SCHEMA_VERSION) => {
            return Err(ParseProblem::FutureVersion(*version));
        }
        Some(toml::Value::Integer(version)) if *version < 1 => {
            return Err(ParseProblem::Invalid(format!(
                "schema_version = {version} is not a version"
            )));
        }
        Some(toml::Value::Integer(_)) => {}
        Some(_) => {
            return Err(ParseProblem::Corrupt(
                "schema_version is not a whole number".to_string(),
            ));
        }
    }
    // Parsed again as a profile, so a wrong field's message has its line number.
    let profile: Profile = toml::from_str(text)
        .map_err(|error| ParseProblem::Corrupt(one_line(&error.to_string())))?;
    profile
        .check()
        .map_err(|error| ParseProblem::Invalid(error.to_string()))?;
    Ok(profile)
}

/// The profile as its file holds it: pretty TOML with a comment on top.
pub fn profile_to_toml(profile: &Profile) -> Result<String, String> {
    let mut body = toml::to_string_pretty(profile).map_err(|error| error.to_string())?;
    if !body.ends_with('\n') {
        body.push('\n');
    }
    Ok(format!(
        "# gputune profile (hand edits are fine; `gputune profile show NAME` checks them).\n\
         # power_limit: watts on the card below, percent_of_default on any other card.\n\
         # Settings left out are left as they are when the profile is applied.\n\n{body}"
    ))
}

/// The deepest nesting of `[` / `{` outside strings and comments. Deliberately simple (it
/// over-counts table headers like `[[a]]` by one): only a bound, checked before the parser
/// recurses.
fn nesting_depth(text: &str) -> usize {
    let bytes = text.as_bytes();
    let (mut depth, mut deepest) = (0usize, 0usize);
    let mut index = 0;
    while index < bytes.len() {
        match bytes[index] {
            b'#' => {
                while index < bytes.len() && bytes[index] != b'\n' {
                    index += 1;
                }
            }
            quote @ (b'"' | b'\'') => {
                let triple = bytes.get(index..index + 3) == Some(&[quote, quote, quote][..]);
                index += if triple { 3 } else { 1 };
                while index < bytes.len() {
                    if quote == b'"' && bytes[index] == b'\\' {
                        index += 2;
                        continue;
                    }
                    if triple {
                        if bytes.get(index..index + 3) == Some(&[quote, quote, quote][..]) {
                            index += 2;
                            break;
                        }
                    } else if bytes[index] == quote || bytes[index] == b'\n' {
                        break;
                    }
                    index += 1;
                }
            }
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        index += 1;
    }
    deepest
}

/// The TOML parser's message on one line (it draws the offending line with carets).
fn one_line(message: &str) -> String {
    let lines: Vec<&str> = message
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !is_source_echo(line))
        .collect();
    // The parser quotes the file (keys, values): escape what a terminal would act on.
    let joined = text::printable(&lines.join("; "));
    if joined.chars().count() > 300 {
        let cut: String = joined.chars().take(300).collect();
        format!("{cut}...")
    } else {
        joined
    }
}

/// "|", "3 | [card", "  |      ^": the parser's picture of the line, not its message.
fn is_source_echo(line: &str) -> bool {
    let after_number = line.trim_start_matches(|character: char| character.is_ascii_digit());
    after_number.trim_start().starts_with('|')
}
