//! Energy per job through the engine, on a simulated card and a manual clock: a job session
//! keeps running figures on its card, and whatever ends it (its client's end, its client gone,
//! shutdown, its card lost) makes the job's record, with the energy counter's difference as its energy.

use gputune_core::job_energy::cost::Price;
use gputune_formats::card::Telemetry;
use gputune_formats::jobs::JOULES_PER_KWH;
use gputune_formats::throttle::ThrottleReason;
use gputune_formats::tuning::JobInfo;

use super::*;

fn slurm_step(client_id: u64) -> ClientInfo {
    ClientInfo {
        id: client_id,
        pid: Some(4000 + client_id as u32),
        uid: Some(0),
        user: Some("root".to_string()),
        label: "gputune_spank.so (job 4242)".to_string(),
        may_write: true,
    }
}

fn job_request(uuid: &str) -> SessionRequest {
    SessionRequest {
        purpose: SessionPurpose::Job,
        changes: vec![GpuChange {
            gpu_uuid: uuid.to_string(),
            settings: vec![Setting::PowerLimit {
                power_limit_mw: 350_000,
            }],
        }],
        fan_curves: Vec::new(),
        job_pid: None,
        job: Some(JobInfo {
            scheduler: "slurm".to_string(),
            job_id: "4242".to_string(),
            step: "batch".to_string(),
            user: "alice".to_string(),
            uid: 1000,
        }),
    }
}

/// Feeds a reading a second for `seconds`, and returns them.
fn readings_for(
    engine: &mut Engine,
    sampler: &mut SimBackend,
    clock: &ManualClock,
    seconds: u64,
) -> Vec<Telemetry> {
    let mut fed = Vec::new();
    for _ in 0..seconds {
        clock.advance_ms(1_000);
        let reading = sampler.telemetry(0);
        engine.on_samples(std::slice::from_ref(&reading));
        engine.tick();
        if let Ok(reading) = reading {
            fed.push(reading);
        }
    }
    fed
}

/// Seconds in `reason` over `readings`: each interval counted at the reasons of its start.
fn seconds_in(readings: &[Telemetry], reason: ThrottleReason) -> f64 {
    readings
        .windows(2)
        .filter(|pair| {
            pair[0]
                .throttle_reasons
                .is_some_and(|reasons| reasons.contains(reason))
        })
        .map(|pair| (pair[1].sampled_at_ms - pair[0].sampled_at_ms) as f64 / 1000.0)
        .sum()
}

#[test]
fn a_job_s_record_has_the_energy_counter_s_difference_its_peaks_and_throttle_time() {
    let (mut engine, mut sampler, clock, _folder) = simulated(LoadPattern::Training);
    let uuid = engine.gpus()[0].identity.uuid.clone();
    engine.set_job_price(Some(Price {
        config: gputune_formats::jobs::CostConfig {
            price_per_kwh: Some(0.5),
            currency: Some("€".to_string()),
            co2_grams_per_kwh: Some(400.0),
        },
        from: "the test's price".to_string(),
    }));
    // The reading before the job: its counter is where the job's energy starts.
    let before = readings_for(&mut engine, &mut sampler, &clock, 3);
    let counter_at_start_mj = before.last().and_then(|r| r.energy_total_mj);
    let step = slurm_step(5);
    let started = engine
        .start_session(&step, &job_request(&uuid))
        .unwrap_or_else(|error| panic!("{error}"));
    let during = readings_for(&mut engine, &mut sampler, &clock, 600);
    let report = engine
        .end_session(&step, started.session, false)
        .unwrap_or_else(|error| panic!("{error}"));
    let Some(record) = report.job_record.clone().map(|record| *record) else {
        panic!("a job's report carries its record: {report:?}");
    };
    assert_eq!(engine.take_job_records(), vec![record.clone()]);
    let counter_at_end_mj = during.last().and_then(|r| r.energy_total_mj);
    let (Some(start_mj), Some(end_mj)) = (counter_at_start_mj, counter_at_end_mj) else {
        panic!("the simulated card has an energy counter");
    };
    assert!(end_mj > start_mj, "a training load uses energy");
    let gpu = &record.gpus[0];
    assert_eq!(gpu.energy_j, (end_mj - start_mj) as f64 / 1000.0);
    assert!(!gpu.energy_estimated && !record.energy_estimated);
    assert_eq!(record.energy_j, gpu.energy_j);
    assert_eq!(record.energy_kwh, gpu.energy_j / JOULES_PER_KWH);
    let peak_w = during.iter().filter_map(|r| r.power_draw_mw).max();
    assert_eq!(gpu.peak_power_w, peak_w.map(|mw| f64::from(mw) / 1000.0));
    assert_eq!(
        gpu.peak_temperature_c,
        during.iter().filter_map(|r| r.temperature_c).max()
    );
    for reason in ThrottleReason::ALL {
        let seconds = gpu
            .throttle
            .iter()
            .find(|time| time.reason == reason)
            .map_or(0.0, |time| time.seconds);
        assert_eq!(seconds, seconds_in(&during, reason), "{}", reason.name());
    }
    assert!(
        !gpu.throttle.is_empty(),
        "a 350 W limit under training load caps the power"
    );
    assert_eq!(gpu.readings, during.len() as u64);
    assert_eq!(
        (gpu.first_reading_ms, gpu.last_reading_ms),
        (
            during.first().map(|r| r.sampled_at_ms),
            during.last().map(|r| r.sampled_at_ms)
        )
    );
    assert_eq!(
        gpu.settings_held,
        vec![Setting::PowerLimit {
            power_limit_mw: 350_000
        }]
    );
    assert_eq!(record.job.job_id, "4242");
    assert_eq!(record.ended, "Put back");
    let cost = record
        .cost
        .unwrap_or_else(|| panic!("the engine had a price"));
    assert_eq!(cost.cost, Some(record.energy_kwh * 0.5));
    assert_eq!(cost.co2_kg, Some(record.energy_kwh * 400.0 / 1000.0));
    // And the card is back.
    let limit = sampler
        .current_settings(0)
        .unwrap_or_else(|error| panic!("{error}"))
        .power_limit_mw;
    assert_ne!(limit, Some(350_000));
}

#[test]
fn a_job_whose_client_goes_whose_engine_stops_or_whose_card_is_lost_is_recorded_too() {
    let (mut engine, mut sampler, clock, _folder) = simulated(LoadPattern::Training);
    let uuid = engine.gpus()[0].identity.uuid.clone();
    readings_for(&mut engine, &mut sampler, &clock, 2);
    let step = slurm_step(6);
    engine
        .start_session(&step, &job_request(&uuid))
        .unwrap_or_else(|error| panic!("{error}"));
    readings_for(&mut engine, &mut sampler, &clock, 30);
    engine.client_gone(step.id);
    let gone = engine.take_job_records();
    assert_eq!(gone.len(), 1, "{gone:?}");
    assert!(gone[0].energy_j > 0.0 && gone[0].cost.is_none());

    let step = slurm_step(7);
    engine
        .start_session(&step, &job_request(&uuid))
        .unwrap_or_else(|error| panic!("{error}"));
    readings_for(&mut engine, &mut sampler, &clock, 30);
    engine.shutdown();
    let stopped = engine.take_job_records();
    assert_eq!(stopped.len(), 1, "{stopped:?}");
    assert_eq!(stopped[0].ended, "gputune is stopping: put back");

    // The card falls off the bus: the record says so, and the session's client hears it.
    let step = slurm_step(9);
    engine
        .start_session(&step, &job_request(&uuid))
        .unwrap_or_else(|error| panic!("{error}"));
    readings_for(&mut engine, &mut sampler, &clock, 10);
    let _ = engine.take_events();
    engine.on_samples(&[Err(gputune_formats::card::DeviceError::GpuLost {
        index: 0,
    })]);
    let lost = engine.take_job_records();
    assert_eq!(lost.len(), 1, "{lost:?}");
    assert!(
        lost[0].ended.contains("Its session ended"),
        "{}",
        lost[0].ended
    );
    assert!(lost[0].energy_j > 0.0);
    let told = engine.take_events().into_iter().any(|event| {
        matches!(event, EngineEvent::SessionEnded { client, report }
            if client == step.id && report.job_record.as_deref() == Some(&lost[0]))
    });
    assert!(told, "the job's client is told, with the record");
    // It answers again.
    readings_for(&mut engine, &mut sampler, &clock, 2);

    // A session of another purpose makes no record.
    let run = client(8, "gputune run");
    let mut request = job_request(&uuid);
    request.purpose = SessionPurpose::Run;
    request.job = None;
    let started = engine
        .start_session(&run, &request)
        .unwrap_or_else(|error| panic!("{error}"));
    readings_for(&mut engine, &mut sampler, &clock, 5);
    let report = engine
        .end_session(&run, started.session, false)
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(report.job_record, None);
    assert!(engine.take_job_records().is_empty());
}
