//! The site's policy, from the plugin's line in `plugstack.conf` (`key=value` words) or a file
//! it names (`config=FILE`, the same words one per line, `#` comments): where the daemon is,
//! which profiles users may pick, a floor and a ceiling for the power limit, and a node default
//! for jobs that ask nothing. Pure: parsed and checked here, applied by `plan`.

use std::path::{Path, PathBuf};

use gputune_core::tuning::request::PowerLimitRequest;
use gputune_core::tuning::request::parse::parse_power_limit;

/// The daemon's socket when `socket=` is not given (the Debian package's and `daemon install`'s).
pub const DEFAULT_SOCKET: &str = "/run/gputune/gputune.sock";
/// Where the job prolog records each job's cards when `records=` is not given (root's, 0700;
/// `/run` ends with the boot, like the jobs it describes). Not under `/run/gputune`: systemd
/// removes the daemon's runtime folder when the daemon is stopped, and the records must
/// outlive a daemon stopped mid-job.
pub const DEFAULT_RECORDS: &str = "/run/gputune-slurm";
/// Where the site's profiles are when `profiles=` is not given.
pub const DEFAULT_PROFILES: &str = "/etc/gputune/profiles";
/// How long a step waits for the daemon's answer when `timeout_s=` is not given.
const DEFAULT_TIMEOUT_S: u64 = 30;
/// A policy file larger than this is refused unread.
const MAX_CONFIG_BYTES: u64 = 64 * 1024;

/// A power limit bound, as the admin wrote it: a share of each card's default, or watts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PowerBound {
    Percent(f64),
    Watts(f64),
}

impl PowerBound {
    /// The bound on a card whose default limit is `default_mw`.
    pub fn on_card_mw(self, default_mw: Option<u32>) -> Option<f64> {
        match self {
            PowerBound::Percent(percent) => default_mw.map(|mw| f64::from(mw) * percent / 100.0),
            PowerBound::Watts(watts) => Some(watts * 1000.0),
        }
    }

    pub fn describe(self) -> String {
        match self {
            PowerBound::Percent(percent) => format!("{} %", number(percent)),
            PowerBound::Watts(watts) => format!("{} W", number(watts)),
        }
    }
}

/// What a job that asks nothing gets on this node.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeDefault {
    /// Nothing: the job's cards are only recorded (energy, cost) and labelled.
    Nothing,
    Power(PowerLimitRequest),
    Profile(String),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    pub socket: PathBuf,
    pub profiles_dir: PathBuf,
    /// Where the job prolog records each job's cards (`allocation`).
    pub records_dir: PathBuf,
    /// `None`: every profile in the folder; else only these names.
    pub allowed_profiles: Option<Vec<String>>,
    pub power_floor: Option<PowerBound>,
    pub power_ceiling: Option<PowerBound>,
    pub node_default: NodeDefault,
    /// May a job opt out of the node default (`--gputune-off`)?
    pub allow_off: bool,
    /// Write the job's energy and cost into its Slurm record (AdminComment) at its end.
    pub admin_comment: bool,
    pub scontrol: PathBuf,
    pub timeout_s: u64,
}

impl Default for Policy {
    fn default() -> Policy {
        Policy {
            socket: PathBuf::from(DEFAULT_SOCKET),
            profiles_dir: PathBuf::from(DEFAULT_PROFILES),
            records_dir: PathBuf::from(DEFAULT_RECORDS),
            allowed_profiles: None,
            power_floor: None,
            power_ceiling: None,
            node_default: NodeDefault::Nothing,
            allow_off: false,
            admin_comment: true,
            scontrol: PathBuf::from("/usr/bin/scontrol"),
            timeout_s: DEFAULT_TIMEOUT_S,
        }
    }
}

impl Policy {
    /// The policy the plugin's arguments say; one sentence naming the word that is wrong.
    pub fn from_args<S: AsRef<str>>(args: &[S]) -> Result<Policy, String> {
        let mut policy = Policy::default();
        for arg in args {
            policy.take(arg.as_ref(), None)?;
        }
        policy.check()?;
        Ok(policy)
    }

    fn take(&mut self, word: &str, file: Option<&Path>) -> Result<(), String> {
        let place = file.map_or_else(
            || "plugstack.conf".to_string(),
            |path| path.display().to_string(),
        );
        let Some((key, value)) = word.split_once('=') else {
            return Err(format!(
                "gputune_spank.so: \"{word}\" in {place} is not key=value (e.g. socket=/run/gputune/gputune.sock)."
            ));
        };
        let value = value.trim();
        let bound = |value: &str| -> Result<PowerBound, String> {
            match parse_power_limit("power bound", value) {
                Ok(PowerLimitRequest::Percent(percent)) if percent > 0.0 => {
                    Ok(PowerBound::Percent(percent))
                }
                Ok(PowerLimitRequest::Watts(watts)) if watts > 0.0 => Ok(PowerBound::Watts(watts)),
                _ => Err(format!(
                    "gputune_spank.so: {key}={value} in {place}: write a share of the default (\"60%\") or watts (\"250W\")."
                )),
            }
        };
        match key.trim() {
            "socket" => self.socket = PathBuf::from(value),
            "profiles" => self.profiles_dir = PathBuf::from(value),
            "records" => self.records_dir = PathBuf::from(value),
            "allow_profiles" => {
                self.allowed_profiles = if value == "*" {
                    None
                } else {
                    Some(
                        value
                            .split(',')
                            .map(str::trim)
                            .filter(|name| !name.is_empty())
                            .map(str::to_string)
                            .collect(),
                    )
                }
            }
            "power_min" => self.power_floor = Some(bound(value)?),
            "power_max" => self.power_ceiling = Some(bound(value)?),
            "default_power" => match parse_power_limit("default_power", value) {
                Ok(request @ (PowerLimitRequest::Percent(_) | PowerLimitRequest::Watts(_))) => {
                    self.node_default = NodeDefault::Power(request)
                }
                _ => {
                    return Err(format!(
                        "gputune_spank.so: default_power={value} in {place}: write a share of the default (\"80%\") or watts (\"300W\")."
                    ));
                }
            },
            "default_profile" => self.node_default = NodeDefault::Profile(value.to_string()),
            "allow_off" => self.allow_off = yes_no(key, value, &place)?,
            "admin_comment" => self.admin_comment = yes_no(key, value, &place)?,
            "scontrol" => self.scontrol = PathBuf::from(value),
            "timeout_s" => {
                self.timeout_s = match value.parse::<u64>() {
                    Ok(seconds @ 1..=600) => seconds,
                    _ => {
                        return Err(format!(
                            "gputune_spank.so: timeout_s={value} in {place}: a whole number of seconds from 1 to 600."
                        ));
                    }
                }
            }
            "config" if file.is_none() => self.read_file(Path::new(value))?,
            other => {
                return Err(format!(
                    "gputune_spank.so: unknown setting \"{other}\" in {place}; known: socket, profiles, records, allow_profiles, power_min, power_max, default_power, default_profile, allow_off, admin_comment, scontrol, timeout_s, config."
                ));
            }
        }
        Ok(())
    }

    fn read_file(&mut self, path: &Path) -> Result<(), String> {
        let content = gputune_core::fsafe::read_limited(
            path,
            MAX_CONFIG_BYTES,
            gputune_core::fsafe::Links::Follow,
        )
        .map_err(|error| format!("gputune_spank.so: the policy file: {error}"))?;
        let text = String::from_utf8(content).map_err(|_| {
            format!(
                "gputune_spank.so: the policy file {} is not UTF-8 text.",
                path.display()
            )
        })?;
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            self.take(line, Some(path))?;
        }
        Ok(())
    }

    fn check(&self) -> Result<(), String> {
        if let (Some(PowerBound::Percent(floor)), Some(PowerBound::Percent(ceiling))) =
            (self.power_floor, self.power_ceiling)
            && floor > ceiling
        {
            return Err(format!(
                "gputune_spank.so: power_min={} is above power_max={} in plugstack.conf.",
                number(floor),
                number(ceiling)
            ));
        }
        if let NodeDefault::Power(PowerLimitRequest::Percent(percent)) = self.node_default {
            for (name, bound, outside) in [
                ("power_min", self.power_floor, percent < 0.0),
                ("power_max", self.power_ceiling, false),
            ] {
                let outside = outside
                    || match bound {
                        Some(PowerBound::Percent(limit)) if name == "power_min" => percent < limit,
                        Some(PowerBound::Percent(limit)) => percent > limit,
                        _ => false,
                    };
                if outside {
                    return Err(format!(
                        "gputune_spank.so: default_power={} % is outside {name} in plugstack.conf.",
                        number(percent)
                    ));
                }
            }
        }
        if let NodeDefault::Profile(name) = &self.node_default
            && !self.profile_allowed(name)
        {
            return Err(format!(
                "gputune_spank.so: default_profile={name} is not among allow_profiles in plugstack.conf."
            ));
        }
        Ok(())
    }

    pub fn profile_allowed(&self, name: &str) -> bool {
        self.allowed_profiles
            .as_ref()
            .is_none_or(|names| names.iter().any(|allowed| allowed == name))
    }
}

fn yes_no(key: &str, value: &str, place: &str) -> Result<bool, String> {
    match value {
        "yes" | "true" | "1" => Ok(true),
        "no" | "false" | "0" => Ok(false),
        _ => Err(format!(
            "gputune_spank.so: {key}={value} in {place}: write yes or no."
        )),
    }
}

/// "80", "62.5": a number as people write it.
pub fn number(value: f64) -> String {
    gputune_formats::units::plain_number(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sites_words_become_its_policy() {
        let policy = Policy::from_args(&[
            "socket=/tmp/g.sock",
            "profiles=/srv/profiles",
            "allow_profiles=quiet, efficient",
            "power_min=60%",
            "power_max=100%",
            "default_power=80%",
            "allow_off=yes",
            "admin_comment=no",
            "timeout_s=5",
        ])
        .unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(policy.socket, PathBuf::from("/tmp/g.sock"));
        assert_eq!(
            policy.allowed_profiles,
            Some(vec!["quiet".to_string(), "efficient".to_string()])
        );
        assert_eq!(policy.power_floor, Some(PowerBound::Percent(60.0)));
        assert_eq!(
            policy.node_default,
            NodeDefault::Power(PowerLimitRequest::Percent(80.0))
        );
        assert!(policy.allow_off && !policy.admin_comment);
        assert!(policy.profile_allowed("quiet") && !policy.profile_allowed("loud"));
        assert_eq!(Policy::from_args::<&str>(&[]), Ok(Policy::default()));
    }

    #[test]
    fn a_wrong_word_is_one_sentence_naming_it() {
        for (args, says) in [
            (vec!["sockett=/x"], "unknown setting \"sockett\""),
            (vec!["power_min"], "is not key=value"),
            (vec!["power_min=lots"], "power_min=lots"),
            (vec!["power_min=90%", "power_max=70%"], "above power_max"),
            (
                vec!["default_power=50%", "power_min=60%"],
                "outside power_min",
            ),
            (
                vec!["allow_profiles=a", "default_profile=b"],
                "not among allow_profiles",
            ),
            (vec!["timeout_s=0"], "from 1 to 600"),
            (vec!["allow_off=maybe"], "yes or no"),
        ] {
            let error = Policy::from_args(&args).expect_err("refused");
            assert!(error.contains(says), "{args:?}: {error}");
        }
    }

    #[test]
    fn a_policy_file_holds_the_same_words() {
        let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("{error}"));
        let path = dir.path().join("policy.conf");
        std::fs::write(
            &path,
            "# the site's policy\ndefault_profile=quiet\n\nallow_off=yes\n",
        )
        .unwrap_or_else(|error| panic!("{error}"));
        let policy = Policy::from_args(&[format!("config={}", path.display())])
            .unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(policy.node_default, NodeDefault::Profile("quiet".into()));
        assert!(policy.allow_off);
        std::fs::write(&path, "config=/etc/passwd\n").unwrap_or_else(|error| panic!("{error}"));
        let error =
            Policy::from_args(&[format!("config={}", path.display())]).expect_err("no nesting");
        assert!(error.contains("unknown setting \"config\""), "{error}");
        let error = Policy::from_args(&["config=/nonexistent/policy"]).expect_err("missing");
        assert!(error.contains("policy file"), "{error}");
    }
}
