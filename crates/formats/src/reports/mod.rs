//! What the `--json` flags print: one report per command, in the style of the rest of
//! `formats` (internally tagged `"type"`, snake_case, objects with named fields, units in field
//! names). Each report's top level says its `format_version`; within a version fields are
//! added, never renamed or removed (docs/json.md says every field and what a script may rely
//! on). Most are only written and derive `Serialize` alone; a check, a scan and a sweep also
//! read back (the window's fixtures, the CLI's tests), so theirs derive `Deserialize` too.

pub mod box_check;
pub mod fan_curves;
pub mod links;
pub mod measure;
pub mod plan;
pub mod plan_setup;
pub mod profile_list;
pub mod rank;
pub mod scan;
pub mod stability;
pub mod stability_watched;
pub mod status;
pub mod sweep;
pub mod sweep_box;
pub mod sweep_step;
pub mod temperature_holds;
