use super::*;
use gputune_formats::reports::sweep_step::{ProgressSource, WorkUnit};

fn read(parser: &mut ProgressParser, text: &str) -> Vec<ProgressReading> {
    parser.feed(text.as_bytes(), 7)
}

fn known(text: &str) -> Vec<(ProgressValue, WorkUnit, ProgressSource)> {
    let mut parser = ProgressParser::new(None).unwrap();
    read(&mut parser, text)
        .into_iter()
        .map(|reading| (reading.value, reading.unit, reading.source))
        .collect()
}

fn rate(units_per_s: f64) -> ProgressValue {
    ProgressValue::Rate { units_per_s }
}

fn count(units_done: f64) -> ProgressValue {
    ProgressValue::Count { units_done }
}

#[test]
fn tqdm_bars_give_rate_and_count() {
    use ProgressSource::Tqdm;
    use WorkUnit::{Other, Sample, Step, Token};
    assert_eq!(
        known(" 45%|████▌     | 45/100 [00:10<00:12, 4.50it/s]\n"),
        vec![(rate(4.5), Step, Tqdm), (count(45.0), Step, Tqdm)]
    );
    assert_eq!(
        known("45it [00:10, 4.50it/s]\n"),
        vec![(rate(4.5), Step, Tqdm), (count(45.0), Step, Tqdm)]
    );
    assert_eq!(
        known("100%|██████████| 3/3 [00:03<00:00, 1.23s/it]\n"),
        vec![(rate(1.0 / 1.23), Step, Tqdm), (count(3.0), Step, Tqdm)]
    );
    assert_eq!(
        known("train: 12/50 [00:01<00:04, 12.3 samples/s]\n"),
        vec![(rate(12.3), Sample, Tqdm), (count(12.0), Sample, Tqdm)]
    );
    assert_eq!(
        known("1.2M/5.0M [00:10<00:30, 4.5k tok/s]\n"),
        vec![
            (rate(4500.0), Token, Tqdm),
            (count(1_200_000.0), Token, Tqdm)
        ]
    );
    assert_eq!(
        known("10/20 [00:01<00:01, 1.23kit/s]\n"),
        vec![(rate(1230.0), Step, Tqdm), (count(10.0), Step, Tqdm)]
    );
    assert_eq!(
        known("5/9 [00:01<00:01, 3.20 frames/s]\n"),
        vec![
            (rate(3.2), Other("frames".to_string()), Tqdm),
            (count(5.0), Other("frames".to_string()), Tqdm)
        ]
    );
    // tqdm's first draw has no rate yet; nothing is read from it.
    assert_eq!(known("  0%|          | 0/100 [00:00<?, ?it/s]\n"), vec![]);
    // Lines that only look alike.
    assert_eq!(known("loading 3/4 shards\n"), vec![]);
    assert_eq!(
        known("bandwidth 12 GB/s\n").len(),
        1,
        "a rate with a unit is a rate"
    );
}

#[test]
fn redraws_colours_and_split_chunks_read_the_same() {
    let text = "\x1b[32m 10%|█         | 10/100 [00:01<00:09, 9.80it/s]\x1b[0m\r 11%|█         | 11/100 [00:01<00:09, 9.90it/s]\r";
    let whole = known(text);
    assert_eq!(whole.len(), 4);
    assert_eq!(whole[0].0, rate(9.8));
    assert_eq!(whole[3].0, count(11.0));
    let mut parser = ProgressParser::new(None).unwrap();
    let mut bytewise = Vec::new();
    for byte in text.as_bytes() {
        bytewise.extend(parser.feed(std::slice::from_ref(byte), 7));
    }
    let bytewise: Vec<_> = bytewise
        .into_iter()
        .map(|reading| (reading.value, reading.unit, reading.source))
        .collect();
    assert_eq!(bytewise, whole);
    // Cursor movement as nested bars draw them.
    assert_eq!(
        known("\x1b[A\x1b[2K 12/100 [00:01<00:09, 9.9it/s]\n").len(),
        2
    );
}

#[test]
fn lightning_bars_count_and_validation_bars_do_not() {
    use ProgressSource::Lightning;
    use WorkUnit::Step;
    assert_eq!(
        known("Epoch 3:  45%|████▌     | 45/100 [00:10<00:12, 4.50it/s, v_num=0, loss=1.23]\r"),
        vec![(rate(4.5), Step, Lightning), (count(45.0), Step, Lightning)]
    );
    assert_eq!(
        known(
            "Epoch 3/9  ━━━━━━━━━━━━━━━━━━━━ 45/100 0:00:10 • 0:00:12 4.50it/s v_num: 0 loss: 1.23\n"
        ),
        vec![(rate(4.5), Step, Lightning), (count(45.0), Step, Lightning)]
    );
    assert_eq!(
        known("Validation DataLoader 0:  50%|█████     | 5/10 [00:01<00:01, 25.00it/s]\r"),
        vec![]
    );
    assert_eq!(
        known("Sanity Checking: 2/2 [00:00<00:00, 30.1it/s]\r"),
        vec![]
    );
    assert_eq!(known("Testing: 1/4 [00:00<00:00, 40.0it/s]\n"), vec![]);
}

#[test]
fn hugging_face_dicts_give_steps_epochs_and_final_rates() {
    use ProgressSource::HuggingFace;
    assert_eq!(
        known("{'loss': 2.1, 'grad_norm': 1.3, 'learning_rate': 4.9e-05, 'epoch': 0.12}\n"),
        vec![(count(0.12), WorkUnit::Epoch, HuggingFace)]
    );
    assert_eq!(
        known("{\"loss\": 2.1, \"step\": 40, \"epoch\": 0.12}\n"),
        vec![(count(40.0), WorkUnit::Step, HuggingFace)]
    );
    assert_eq!(
        known(
            "{'train_runtime': 120.5, 'train_samples_per_second': 12.3, 'train_steps_per_second': 1.5, 'train_tokens_per_second': 6300.0, 'train_loss': 1.9, 'epoch': 1.0}\n"
        ),
        vec![
            (rate(12.3), WorkUnit::Sample, HuggingFace),
            (rate(1.5), WorkUnit::Step, HuggingFace),
            (rate(6300.0), WorkUnit::Token, HuggingFace),
            (count(1.0), WorkUnit::Epoch, HuggingFace),
        ]
    );
    assert_eq!(
        known(
            "{'eval_loss': 1.8, 'eval_samples_per_second': 80.1, 'eval_steps_per_second': 10.0, 'epoch': 0.5}\n"
        ),
        vec![]
    );
}

#[test]
fn a_custom_regex_reads_rates_seconds_counts_and_units() {
    let readings = |pattern: &str, text: &str| {
        let mut parser = ProgressParser::new(Some(pattern)).unwrap();
        read(&mut parser, text)
            .into_iter()
            .map(|reading| (reading.value, reading.unit, reading.source))
            .collect::<Vec<_>>()
    };
    use ProgressSource::Custom;
    assert_eq!(
        readings(
            r"throughput=(?P<rate>[\d.]+) (?P<unit>\w+)/s",
            "iter 9 throughput=812.5 tokens/s\n"
        ),
        vec![(rate(812.5), WorkUnit::Token, Custom)]
    );
    assert_eq!(
        readings(r"step time (?P<seconds_per>[\d.]+)s", "step time 0.25s\n"),
        vec![(rate(4.0), WorkUnit::Step, Custom)]
    );
    assert_eq!(
        readings(r"^step (?P<count>\d+)", "step 120 loss 2.0\nnothing\n"),
        vec![(count(120.0), WorkUnit::Step, Custom)]
    );
    // Only the custom regex is used: a tqdm bar is not read then.
    assert_eq!(
        readings(r"^step (?P<count>\d+)", "45/100 [00:10<00:12, 4.50it/s]\n"),
        vec![]
    );
    let missing = ProgressParser::new(Some(r"speed (\d+)")).err().unwrap();
    assert!(missing.contains("(?P<rate>"), "{missing}");
    let invalid = ProgressParser::new(Some(r"(?P<rate>[")).err().unwrap();
    assert!(invalid.contains("not a valid regex"), "{invalid}");
    let huge = ProgressParser::new(Some(r"(?P<rate>\w{1000}){1000}"))
        .err()
        .unwrap();
    assert!(huge.contains("not a valid regex"), "{huge}");
}

#[test]
fn odd_bytes_and_endless_lines_are_survived() {
    let mut parser = ProgressParser::new(None).unwrap();
    assert_eq!(
        parser
            .feed(b"\xff\xfe 45/100 [00:10<00:12, 4.50it/s]\n", 1)
            .len(),
        2
    );
    let endless = vec![b'x'; 1 << 20];
    assert!(parser.feed(&endless, 2).is_empty());
    assert!(parser.pending.len() <= MAX_LINE_BYTES);
    let after = parser.feed(b"\n 46/100 [00:10<00:12, 4.60it/s]\n", 3);
    assert_eq!(after.len(), 2);
    assert_eq!(after[0].value, rate(4.6));
    assert_eq!(after[0].at_ms, 3);
    // Zero and absurd rates are not readings.
    assert!(
        parser
            .feed(b"1/2 [00:01<00:01, 0.00it/s]\n", 4)
            .iter()
            .all(|reading| !matches!(reading.value, ProgressValue::Rate { .. }))
    );
}

#[test]
fn a_hundred_thousand_bar_redraws_are_all_read() {
    let mut parser = ProgressParser::new(None).unwrap();
    let mut text = String::new();
    for step in 0..100_000u32 {
        text.push_str(&format!(
            "\r{step}/100000 [00:10<00:12, 9.{}it/s]",
            step % 10
        ));
    }
    text.push('\n');
    let readings = parser.feed(text.as_bytes(), 0);
    // Every redraw but the first one (no line end before it... it ends at the next \r).
    assert_eq!(readings.len(), 2 * 100_000);
}
