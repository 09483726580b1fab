//! Which measured setting to recommend. Every step is compared with the first setting (the
//! card's stock behaviour for the swept controls), averaged with its repeat at the end; the
//! difference between those two is the run's noise, reported with the answer.

use gputune_formats::reports::sweep::{ChosenStep, Comparison, Noise, Objective, Reference};
use gputune_formats::reports::sweep_step::StepResult;

/// The first setting (with its repeat, when measured) as the reference, and the noise.
pub fn reference(results: &[StepResult]) -> Option<(Reference, Option<Noise>)> {
    let first = results.iter().find(|result| !result.step.is_repeat)?;
    let first_values = values(first)?;
    let repeat = results
        .iter()
        .rev()
        .find(|result| result.step.is_repeat && result.unstable.is_none())
        .and_then(values);
    Some(match repeat {
        Some(again) => {
            let units_per_s = (first_values.0 + again.0) / 2.0;
            let energy = (first_values.1 + again.1) / 2.0;
            (
                Reference {
                    units_per_s,
                    energy_per_unit_j: energy,
                },
                Some(Noise {
                    throughput_drift_pct: (again.0 - first_values.0).abs() / units_per_s * 100.0,
                    energy_drift_pct: Some((again.1 - first_values.1).abs() / energy * 100.0),
                }),
            )
        }
        None => (
            Reference {
                units_per_s: first_values.0,
                energy_per_unit_j: first_values.1,
            },
            None,
        ),
    })
}

fn values(result: &StepResult) -> Option<(f64, f64)> {
    let units_per_s = result.throughput?.units_per_s;
    let energy = result.energy_per_unit_j?;
    (units_per_s > 0.0 && energy > 0.0).then_some((units_per_s, energy))
}

/// `result` against the reference.
pub fn compare(result: &StepResult, reference: &Reference) -> Option<Comparison> {
    let (units_per_s, energy) = values(result)?;
    Some(Comparison {
        slowdown_pct: (1.0 - units_per_s / reference.units_per_s) * 100.0,
        energy_saved_pct: (1.0 - energy / reference.energy_per_unit_j) * 100.0,
    })
}

/// Marks each step whose own spread is larger than the difference it measured from the
/// reference: that difference cannot be trusted.
pub fn flag_noisy_steps(results: &mut [StepResult]) {
    let Some((reference, _)) = reference(results) else {
        return;
    };
    // The first setting is the reference: its drift is the noise, reported on its own.
    for result in results.iter_mut().skip(1) {
        if result.step.is_repeat || result.unstable.is_some() {
            continue;
        }
        let (Some(comparison), Some(spread)) = (
            compare(result, &reference),
            result
                .throughput
                .and_then(|throughput| throughput.spread_pct),
        ) else {
            continue;
        };
        let difference = comparison.slowdown_pct.abs();
        result.noisy = (spread > difference && difference > 0.0).then(|| {
            format!(
                "its throughput spread ({spread:.1} %) is larger than its difference from the first setting ({difference:.1} %)"
            )
        });
    }
}

/// The setting `objective` picks among the stable, measured steps.
pub fn recommend(results: &[StepResult], objective: Objective) -> Result<ChosenStep, String> {
    recommend_in(results, objective, "unit of work")
}

/// [`recommend`], its answer naming the job's own unit ("step", "sample").
pub fn recommend_in(
    results: &[StepResult],
    objective: Objective,
    unit: &str,
) -> Result<ChosenStep, String> {
    if results.is_empty() {
        return Err("No setting was measured to its end.".to_string());
    }
    let (reference, noise) = reference(results).ok_or(
        "The first setting has no measurement (no throughput or power was read), so nothing can be compared: see the messages above.",
    )?;
    let candidates: Vec<(usize, Comparison)> = results
        .iter()
        .enumerate()
        .filter(|(_, result)| !result.step.is_repeat && result.unstable.is_none())
        .filter_map(|(index, result)| {
            // The first setting stands for itself at the reference (the mean with its repeat).
            let comparison = if index == 0 {
                Comparison {
                    slowdown_pct: 0.0,
                    energy_saved_pct: 0.0,
                }
            } else {
                compare(result, &reference)?
            };
            Some((index, comparison))
        })
        .collect();
    let allowed: Vec<&(usize, Comparison)> = candidates
        .iter()
        .filter(|(_, comparison)| match objective {
            Objective::EnergyWithinSlowdown { max_slowdown_pct } => {
                comparison.slowdown_pct <= max_slowdown_pct
            }
            Objective::LeastEnergy | Objective::PerfPerWatt => true,
        })
        .collect();
    let best = allowed
        .iter()
        .max_by(|a, b| a.1.energy_saved_pct.total_cmp(&b.1.energy_saved_pct))
        .ok_or("No setting was measured.")?;
    let (step_index, comparison) = (best.0, best.1);
    let label = results[step_index].step.label.clone();
    let band = noise.map(|noise| noise.band_pct());
    // Keeping the first setting compares it with nothing: no difference to be lost in noise.
    let within_noise = step_index != 0
        && band.is_some_and(|band| {
            comparison.energy_saved_pct.abs() <= band && comparison.slowdown_pct.abs() <= band
        });
    // The setting that saved energy but was ruled out as too slow, the least slow of them.
    let too_slow = candidates
        .iter()
        .filter(|(_, other)| other.energy_saved_pct > 0.0)
        .filter(|(index, _)| {
            !allowed
                .iter()
                .any(|(allowed_index, _)| allowed_index == index)
        })
        .min_by(|a, b| a.1.slowdown_pct.total_cmp(&b.1.slowdown_pct));
    let sentence = chosen_sentence(
        results,
        objective,
        unit,
        (step_index, comparison),
        too_slow,
        (noise, within_noise),
    );
    Ok(ChosenStep {
        step_index,
        label,
        comparison,
        noise,
        within_noise,
        sentence,
    })
}

/// The answer in one or two sentences: what to run (or why to keep the first setting), what it
/// costs against the first setting, and the run's noise.
fn chosen_sentence(
    results: &[StepResult],
    objective: Objective,
    unit: &str,
    (step_index, comparison): (usize, Comparison),
    too_slow: Option<&(usize, Comparison)>,
    (noise, within_noise): (Option<Noise>, bool),
) -> String {
    let label = &results[step_index].step.label;
    let first_label = results
        .iter()
        .find(|result| !result.step.is_repeat)
        .map(|result| result.step.label.as_str())
        .unwrap_or_default();
    let band = noise.map(|noise| noise.band_pct());
    let mut sentence = if step_index == 0 {
        match (objective, too_slow) {
            (Objective::EnergyWithinSlowdown { max_slowdown_pct }, Some((index, other))) => {
                let mut text = format!(
                    "Keep {label}: the settings that use less energy per {unit} are more than {} % slower (the closest, {}, is {:.1} % slower for {:.1} % less energy).",
                    crate::text::number(max_slowdown_pct),
                    results[*index].step.label,
                    other.slowdown_pct,
                    other.energy_saved_pct
                );
                // Over the limit by less than the measurement can tell: say so, it may flip.
                let spread = results[*index]
                    .throughput
                    .and_then(|throughput| throughput.spread_pct)
                    .unwrap_or(0.0)
                    .max(band.unwrap_or(0.0));
                if other.slowdown_pct - max_slowdown_pct <= spread {
                    text.push_str(&format!(
                        " That is over your limit by less than the measurement's spread ({spread:.1} %): longer steps (--step-s) or a limit of {} % would decide.",
                        crate::text::number((other.slowdown_pct + 0.5).ceil())
                    ));
                }
                text
            }
            _ => format!(
                "Keep {label}: no other setting used less energy per {unit} ({}).",
                objective.describe()
            ),
        }
    } else {
        let speed = if comparison.slowdown_pct >= 0.0 {
            format!("{:.1} % slower", comparison.slowdown_pct)
        } else {
            format!("{:.1} % faster", -comparison.slowdown_pct)
        };
        let energy = if comparison.energy_saved_pct >= 0.0 {
            format!("{:.1} % less energy", comparison.energy_saved_pct)
        } else {
            format!("{:.1} % more energy", -comparison.energy_saved_pct)
        };
        format!(
            "Run at {label}: {speed}, {energy} per {unit} than {first_label} ({}).",
            objective.describe()
        )
    };
    match (noise, within_noise) {
        (Some(noise), false) => sentence.push_str(&format!(
            " Run-to-run noise: {:.1} % (the first setting measured again at the end).",
            noise.band_pct()
        )),
        (Some(noise), true) => sentence.push_str(&format!(
            " That is within the run's noise ({:.1} %): measure longer steps (--step-s) to tell them apart.",
            noise.band_pct()
        )),
        (None, _) => sentence.push_str(" The noise is unknown: the first setting was not measured again."),
    }
    sentence
}

#[cfg(test)]
mod tests {
    use super::*;
    use gputune_formats::reports::sweep_step::SweepStep;
    use gputune_formats::reports::sweep_step::Throughput;
    use gputune_formats::tuning::TrialStats;

    fn result(percent: f64, units_per_s: f64, watts: f64, is_repeat: bool) -> StepResult {
        StepResult {
            step: SweepStep {
                label: format!("{percent} %"),
                power_limit_pct: percent,
                power_limit_mw: (percent * 4_500.0) as u32,
                clock_cap_mhz: None,
                gpu_clock_offset_mhz: None,
                settings: Vec::new(),
                is_repeat,
                in_force_note: String::new(),
            },
            throughput: Some(Throughput {
                units_per_s,
                spread_pct: Some(0.5),
            }),
            average_power_w: Some(watts),
            energy_per_unit_j: Some(watts / units_per_s),
            stats: TrialStats::default(),
            measured_s: 70.0,
            unstable: None,
            noisy: None,
            cards: Vec::new(),
        }
    }

    /// A 4090-like curve: speed falls slowly, power fast.
    fn sweep() -> Vec<StepResult> {
        vec![
            result(100.0, 10.0, 440.0, false),
            result(90.0, 9.9, 400.0, false),
            result(80.0, 9.75, 355.0, false),
            result(70.0, 9.4, 312.0, false),
            result(60.0, 8.6, 268.0, false),
            result(100.0, 10.0, 440.0, true),
        ]
    }

    #[test]
    fn each_objective_picks_its_setting_and_says_what_it_costs() {
        let results = sweep();
        let within = recommend(&results, Objective::default()).unwrap();
        assert_eq!(within.label, "80 %");
        assert!((within.comparison.slowdown_pct - 2.5).abs() < 1e-9);
        assert!(
            within.sentence.contains("2.5 % slower"),
            "{}",
            within.sentence
        );
        assert!(
            within.sentence.contains("less energy"),
            "{}",
            within.sentence
        );
        let energy = recommend(&results, Objective::LeastEnergy).unwrap();
        // 268/8.6 = 31.2 J against 312/9.4 = 33.2 J: 60 % wins on energy alone.
        assert_eq!(energy.label, "60 %");
        assert_eq!(
            recommend(&results, Objective::PerfPerWatt).unwrap().label,
            "60 %"
        );
        let strict = recommend(
            &results,
            Objective::EnergyWithinSlowdown {
                max_slowdown_pct: 1.5,
            },
        )
        .unwrap();
        assert_eq!(strict.label, "90 %");
    }

    #[test]
    fn keeping_the_first_setting_names_the_nearest_one_ruled_out() {
        let results = sweep();
        let keep = recommend_in(
            &results,
            Objective::EnergyWithinSlowdown {
                max_slowdown_pct: 0.6,
            },
            "step",
        )
        .unwrap();
        assert_eq!(keep.step_index, 0);
        assert!(!keep.within_noise);
        assert!(
            keep.sentence.starts_with("Keep 100 %: the settings that use less energy per step are more than 0.6 % slower (the closest, 90 %, is 1.0 % slower for 8.2 % less energy)."),
            "{}",
            keep.sentence
        );
        assert!(
            keep.sentence.contains("Run-to-run noise: 0.0 %"),
            "{}",
            keep.sentence
        );
        // 90 % is over the 0.6 % limit by 0.4 %, less than its spread: it could flip.
        assert!(
            keep.sentence
                .contains("over your limit by less than the measurement's spread (0.5 %)"),
            "{}",
            keep.sentence
        );
    }

    #[test]
    fn an_unstable_setting_is_never_recommended() {
        let mut results = sweep();
        results[2].unstable = Some("Xid 13".to_string());
        let within = recommend(&results, Objective::default()).unwrap();
        assert_eq!(within.label, "90 %");
    }

    #[test]
    fn the_repeat_gives_the_noise_and_a_difference_inside_it_is_said() {
        let mut results = sweep();
        // The card warmed up: the repeat runs 2 % slower.
        results[5] = result(100.0, 9.8, 440.0, true);
        let (reference, noise) = reference(&results).unwrap();
        assert!((reference.units_per_s - 9.9).abs() < 1e-9);
        let noise = noise.unwrap();
        assert!(
            (noise.throughput_drift_pct - 2.0202).abs() < 1e-3,
            "{noise:?}"
        );
        let strict = recommend(
            &results,
            Objective::EnergyWithinSlowdown {
                max_slowdown_pct: 0.5,
            },
        )
        .unwrap();
        // 90 % is 0 % slower than the mean of 10.0 and 9.8 and saves 8 %: outside the noise.
        assert_eq!(strict.label, "90 %");
        assert!(!strict.within_noise);
        let mut flat = sweep();
        for step in &mut flat {
            step.throughput = Some(Throughput {
                units_per_s: 10.0,
                spread_pct: Some(3.0),
            });
            step.energy_per_unit_j = Some(44.0);
        }
        flat[5].throughput = Some(Throughput {
            units_per_s: 10.2,
            spread_pct: Some(3.0),
        });
        flat[1].throughput = Some(Throughput {
            units_per_s: 9.95,
            spread_pct: Some(3.0),
        });
        flat[1].energy_per_unit_j = Some(43.8);
        let answer = recommend(&flat, Objective::default()).unwrap();
        assert!(answer.within_noise, "{answer:?}");
        assert!(
            answer.sentence.contains("within the run's noise"),
            "{}",
            answer.sentence
        );
        flag_noisy_steps(&mut flat);
        assert!(flat[1].noisy.as_deref().unwrap().contains("spread (3.0 %)"));
    }

    #[test]
    fn without_a_first_measurement_there_is_no_answer() {
        let mut results = sweep();
        results[0].throughput = None;
        results[0].energy_per_unit_j = None;
        assert!(recommend(&results, Objective::default()).is_err());
        assert!(Objective::parse("fastest", 3.0).is_err());
        assert!(Objective::parse("energy", f64::NAN).is_err());
        assert_eq!(
            Objective::parse("within-slowdown", 5.0),
            Ok(Objective::EnergyWithinSlowdown {
                max_slowdown_pct: 5.0
            })
        );
    }
}
