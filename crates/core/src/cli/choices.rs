//! A closed set of a format's values on the command line (`--precision bf16-mixed`,
//! `--pattern pulsed`): the types live in gputune-formats, which knows nothing of clap, so each
//! command gives their names and help (a `Choice`: the planner's in `plan/choices.rs`, the
//! check's load in `stability.rs`), and this one parser reads them for every command.

use std::marker::PhantomData;

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};

/// One closed set of values the command line takes.
pub trait Choice: Copy + Send + Sync + 'static {
    /// Every value, in the order `--help` lists them.
    fn all() -> &'static [Self];
    /// The value's name on the command line.
    fn cli_name(self) -> &'static str;
    /// What `--help` says of the value, if anything.
    fn help(self) -> Option<&'static str> {
        None
    }
}

/// Parses a [`Choice`] by its name, listing every value (with its help) as `--help` and the
/// error for a wrong one show them.
#[derive(Clone)]
pub struct ChoiceParser<T>(PhantomData<T>);

/// The value parser of a [`Choice`] (`#[arg(value_parser = choice::<Precision>())]`).
pub fn choice<T: Choice>() -> ChoiceParser<T> {
    ChoiceParser(PhantomData)
}

fn possible_values<T: Choice>() -> impl Iterator<Item = PossibleValue> {
    T::all().iter().map(|value| {
        let possible = PossibleValue::new(value.cli_name());
        match value.help() {
            Some(help) => possible.help(help),
            None => possible,
        }
    })
}

impl<T: Choice> TypedValueParser for ChoiceParser<T> {
    type Value = T;

    fn parse_ref(
        &self,
        command: &clap::Command,
        argument: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<T, clap::Error> {
        // clap's own parser checks the name and words the error for a wrong one.
        let name = PossibleValuesParser::new(possible_values::<T>())
            .parse_ref(command, argument, value)?;
        T::all()
            .iter()
            .copied()
            .find(|value| value.cli_name() == name)
            .ok_or_else(|| clap::Error::new(clap::error::ErrorKind::InvalidValue).with_cmd(command))
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        Some(Box::new(possible_values::<T>()))
    }
}
