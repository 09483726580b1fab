//! What a job asked for with the plugin's options (`--gputune-profile`, `--gputune-power-limit`,
//! `--gputune-off`), and whether the site's policy lets it: checked at submission (srun, sbatch,
//! salloc), where a refusal fails the command before the job exists, and again on the node.

use gputune_core::tuning::request::PowerLimitRequest;
use gputune_core::tuning::request::parse::parse_power_limit;

use crate::policy::{NodeDefault, Policy, PowerBound, number};

/// The longest profile name (as `gputune profile` allows).
const NAME_MAX_CHARS: usize = 100;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Ask {
    pub profile: Option<String>,
    pub power_limit: Option<PowerLimitRequest>,
    /// `--gputune-off`: no tuning (where the policy allows opting out of the node default).
    pub off: bool,
}

/// What a job runs with on this node, once its ask met the policy.
#[derive(Debug, Clone, PartialEq)]
pub struct Wanted {
    pub profile: Option<String>,
    pub power_limit: Option<PowerLimitRequest>,
    /// Said to the job: where the settings came from ("the node's default, 80 %").
    pub origin: String,
}

impl Wanted {
    pub fn is_nothing(&self) -> bool {
        self.profile.is_none() && self.power_limit.is_none()
    }
}

/// `--gputune-profile=NAME`: a name, never a path.
pub fn parse_profile(text: &str) -> Result<String, String> {
    let name = text.trim();
    if name.is_empty()
        || name.chars().count() > NAME_MAX_CHARS
        || name.starts_with('.')
        || name.contains('/')
        || name.chars().any(char::is_control)
    {
        return Err(format!(
            "gputune: --gputune-profile=\"{}\" is not a profile name (1 to {NAME_MAX_CHARS} characters, no '/', not starting with '.').",
            gputune_core::text::printable(text)
        ));
    }
    Ok(name.to_string())
}

/// `--gputune-power-limit=80%` or `=300W`; a bare number is refused (percent or watts?).
pub fn parse_power(text: &str) -> Result<PowerLimitRequest, String> {
    match parse_power_limit("--gputune-power-limit", text) {
        Ok(request @ PowerLimitRequest::Percent(value)) if value > 0.0 => Ok(request),
        Ok(request @ PowerLimitRequest::Watts(value)) if value > 0.0 => Ok(request),
        Ok(PowerLimitRequest::Unitless(value)) => Err(format!(
            "gputune: --gputune-power-limit={} has no unit: write {0}% (of each card's default limit) or {0}W.",
            number(value)
        )),
        _ => Err(format!(
            "gputune: --gputune-power-limit=\"{}\" is not a power limit: write a share of each card's default (\"80%\") or watts (\"300W\").",
            gputune_core::text::printable(text)
        )),
    }
}

impl Ask {
    /// What the job runs with under `policy`, or the one sentence that refuses it. Everything
    /// that can be judged without the node's cards is judged here (a percentage against the
    /// floor and the ceiling in percent); the rest on the node (`plan`).
    pub fn resolve(&self, policy: &Policy) -> Result<Wanted, String> {
        if self.off && (self.profile.is_some() || self.power_limit.is_some()) {
            return Err(
                "gputune: --gputune-off asks for no tuning; leave out --gputune-profile and --gputune-power-limit with it."
                    .to_string(),
            );
        }
        if let Some(name) = &self.profile
            && !policy.profile_allowed(name)
        {
            return Err(format!(
                "gputune: profile \"{name}\" is not one this cluster lets jobs use; allowed: {}.",
                policy
                    .allowed_profiles
                    .as_deref()
                    .unwrap_or_default()
                    .join(", ")
            ));
        }
        if let Some(PowerLimitRequest::Percent(percent)) = self.power_limit {
            check_percent(percent, policy)?;
        }
        if self.off {
            if policy.node_default != NodeDefault::Nothing && !policy.allow_off {
                return Err(format!(
                    "gputune: this cluster runs every job at {}; --gputune-off is not allowed here.",
                    describe_default(&policy.node_default)
                ));
            }
            return Ok(Wanted {
                profile: None,
                power_limit: None,
                origin: "--gputune-off".to_string(),
            });
        }
        if self.profile.is_some() || self.power_limit.is_some() {
            let mut origin = Vec::new();
            if let Some(name) = &self.profile {
                origin.push(format!("--gputune-profile={name}"));
            }
            if let Some(power) = self.power_limit {
                origin.push(format!("--gputune-power-limit={}", describe_power(power)));
            }
            return Ok(Wanted {
                profile: self.profile.clone(),
                power_limit: self.power_limit,
                origin: origin.join(" "),
            });
        }
        let origin = format!(
            "the node's default, {}",
            describe_default(&policy.node_default)
        );
        Ok(match &policy.node_default {
            NodeDefault::Nothing => Wanted {
                profile: None,
                power_limit: None,
                origin: "nothing asked".to_string(),
            },
            NodeDefault::Power(power) => Wanted {
                profile: None,
                power_limit: Some(*power),
                origin,
            },
            NodeDefault::Profile(name) => Wanted {
                profile: Some(name.clone()),
                power_limit: None,
                origin,
            },
        })
    }
}

fn check_percent(percent: f64, policy: &Policy) -> Result<(), String> {
    if let Some(PowerBound::Percent(floor)) = policy.power_floor
        && percent < floor
    {
        return Err(format!(
            "gputune: a power limit of {} % is below this cluster's floor of {} %: ask for {} % or more.",
            number(percent),
            number(floor),
            number(floor)
        ));
    }
    if let Some(PowerBound::Percent(ceiling)) = policy.power_ceiling
        && percent > ceiling
    {
        return Err(format!(
            "gputune: a power limit of {} % is above this cluster's ceiling of {} %: ask for {} % or less.",
            number(percent),
            number(ceiling),
            number(ceiling)
        ));
    }
    Ok(())
}

pub fn describe_power(power: PowerLimitRequest) -> String {
    match power {
        PowerLimitRequest::Percent(percent) => format!("{}%", number(percent)),
        PowerLimitRequest::Watts(watts) | PowerLimitRequest::Unitless(watts) => {
            format!("{}W", number(watts))
        }
    }
}

fn describe_default(default: &NodeDefault) -> String {
    match default {
        NodeDefault::Nothing => "no tuning".to_string(),
        NodeDefault::Power(power) => format!("a power limit of {}", describe_power(*power)),
        NodeDefault::Profile(name) => format!("profile \"{name}\""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(args: &[&str]) -> Policy {
        Policy::from_args(args).unwrap_or_else(|error| panic!("{error}"))
    }

    #[test]
    fn options_are_names_and_powers_with_units() {
        assert_eq!(parse_profile(" quiet "), Ok("quiet".to_string()));
        for bad in ["", "../etc/x", ".hidden", "a/b", "x\u{7}"] {
            assert!(parse_profile(bad).is_err(), "{bad:?}");
        }
        assert_eq!(parse_power("80%"), Ok(PowerLimitRequest::Percent(80.0)));
        assert_eq!(parse_power("300W"), Ok(PowerLimitRequest::Watts(300.0)));
        let said = parse_power("80").expect_err("no unit");
        assert!(
            said.contains("write 80% (of each card's default limit) or 80W"),
            "{said}"
        );
        assert!(parse_power("lots").is_err());
        assert!(parse_power("-5%").is_err());
    }

    #[test]
    fn the_policy_decides_what_a_job_gets() {
        let site = policy(&[
            "allow_profiles=quiet,efficient",
            "power_min=60%",
            "power_max=100%",
            "default_power=80%",
        ]);
        let nothing = Ask::default()
            .resolve(&site)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(nothing.power_limit, Some(PowerLimitRequest::Percent(80.0)));
        assert!(
            nothing.origin.contains("node's default"),
            "{}",
            nothing.origin
        );

        let asked = Ask {
            profile: Some("quiet".into()),
            power_limit: Some(PowerLimitRequest::Percent(70.0)),
            off: false,
        };
        let wanted = asked.resolve(&site).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(wanted.profile.as_deref(), Some("quiet"));

        for (ask, says) in [
            (
                Ask {
                    profile: Some("loud".into()),
                    ..Ask::default()
                },
                "profile \"loud\" is not one this cluster lets jobs use; allowed: quiet, efficient.",
            ),
            (
                Ask {
                    power_limit: Some(PowerLimitRequest::Percent(50.0)),
                    ..Ask::default()
                },
                "below this cluster's floor of 60 %",
            ),
            (
                Ask {
                    power_limit: Some(PowerLimitRequest::Percent(110.0)),
                    ..Ask::default()
                },
                "above this cluster's ceiling of 100 %",
            ),
            (
                Ask {
                    off: true,
                    ..Ask::default()
                },
                "runs every job at a power limit of 80%; --gputune-off is not allowed here.",
            ),
            (
                Ask {
                    off: true,
                    profile: Some("quiet".into()),
                    ..Ask::default()
                },
                "leave out --gputune-profile",
            ),
        ] {
            let said = ask.resolve(&site).expect_err("refused");
            assert!(said.contains(says), "{ask:?}: {said}");
        }
        let lenient = policy(&["default_power=80%", "allow_off=yes"]);
        let off = Ask {
            off: true,
            ..Ask::default()
        }
        .resolve(&lenient)
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(off.is_nothing());
    }
}
