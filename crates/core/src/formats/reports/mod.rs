//! The `--json` reports the commands print on stdout: a promise to scripts, each field written
//! in docs/json.md and pinned by a golden file.

pub mod measure;
