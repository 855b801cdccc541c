//! Formats on serde, end to end: a word count per one-minute event-time
//! window over JSON-lines input, written as CSV; malformed lines counted
//! with their position and reason, and skipped.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use serde::Deserialize;
use streamwork::prelude::*;

#[derive(Clone, Debug, Deserialize)]
struct Event {
    time: i64,
    text: String,
}

#[test]
fn a_windowed_word_count_reads_json_lines_and_writes_csv() {
    let dir = std::env::temp_dir().join(format!("streamwork-formats-pid{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("events.jsonl");
    let output = dir.join("counts");
    let texts = ["the cat", "the dog", "a cat and a dog", "the end"];
    let mut file = std::fs::File::create(&input).unwrap();
    let mut expected: BTreeMap<(i64, String), u64> = BTreeMap::new();
    for i in 0..400i64 {
        let (time, text) = (i * 1_000, texts[(i % 4) as usize]);
        writeln!(file, r#"{{"time": {time}, "text": "{text}"}}"#).unwrap();
        for word in text.split_whitespace() {
            *expected
                .entry((time / 60_000 * 60_000, word.to_string()))
                .or_default() += 1;
        }
        match i {
            // Malformed: not JSON, the wrong types, not UTF-8; and a blank line.
            100 => writeln!(file, "not json").unwrap(),
            200 => writeln!(file, r#"{{"time": "noon", "text": 7}}"#).unwrap(),
            300 => file
                .write_all(b"{\"time\": 1, \"text\": \"\xff\xfe\"}\n")
                .unwrap(),
            350 => writeln!(file).unwrap(),
            _ => {}
        }
    }
    drop(file);

    let events = FileSource::<Event>::json(&input);
    let errors = events.errors().clone();
    let graph = job! {
        name "windowed word count";
        source events = events;
        operator timed = Watermarks::bounded(Duration::from_secs(5))
            .timestamps(|e: &Event| Timestamp::from_millis(e.time)) <- events;
        operator words = flat_map(|e: Event| e.text.split_whitespace().map(str::to_owned).collect::<Vec<_>>()) <- timed;
        operator counts { results, late } = Windows::tumbling(Duration::from_secs(60)).count()
            <- words.key(|w: &String| w.clone());
        operator rows = |r: WindowResult<String, u64>| (r.window.start.millis(), r.key, r.value) <- counts.results;
        sink out = FileSink::csv(&output) <- rows;
        drop counts.late;
    }
    .unwrap();
    graph.run().unwrap();

    let mut counted: BTreeMap<(i64, String), u64> = BTreeMap::new();
    for entry in std::fs::read_dir(&output).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        for line in text.lines() {
            let (start, word, count): (i64, String, u64) =
                streamwork::connectors::formats::from_csv_line(line).unwrap();
            assert!(
                counted.insert((start, word), count).is_none(),
                "one row per window and word"
            );
        }
    }
    assert_eq!(counted, expected);

    assert_eq!(errors.count(), 3, "{:?}", errors.examples());
    let examples = errors.examples().join("\n");
    for reason in ["not valid JSON", "invalid UTF-8"] {
        assert!(examples.contains(reason), "{examples}");
    }
    assert!(
        examples.contains("events.jsonl"),
        "each names its file: {examples}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn lines_that_do_not_decode_become_dead_letters_with_their_position_and_reason() {
    use streamwork::connectors::formats::DeadLetter;
    let dir = std::env::temp_dir().join(format!("streamwork-dead-pid{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("in.jsonl");
    std::fs::write(
        &input,
        b"{\"time\": 1, \"text\": \"a\"}\nnot json\n\n{\"time\": 2}\n\xff\n{\"time\": 3, \"text\": \"b\"}\n",
    )
    .unwrap();
    let (records, dead) = (CollectSink::new(), CollectSink::new());
    let graph = job! {
        source lines = FileSource::<Result<Event, DeadLetter>>::json_with_dead_letters(&input);
        operator good = filter_map(|r: Result<Event, DeadLetter>| r.ok()) <- lines;
        operator bad = filter_map(|r: Result<Event, DeadLetter>| r.err()) <- lines;
        operator texts = |e: Event| e.text <- good;
        sink kept = records.clone() <- texts;
        sink letters = dead.clone() <- bad;
    }
    .unwrap();
    graph.run().unwrap();
    assert_eq!(records.values(), vec!["a".to_string(), "b".to_string()]);
    let letters = dead.values();
    let summary: Vec<(String, String)> = letters
        .iter()
        .map(|d| {
            (
                d.position.rsplit(':').next().unwrap().to_string(),
                d.line.clone(),
            )
        })
        .collect();
    // Line 3, blank, is skipped; line 4 lacks a field; line 5 is not UTF-8.
    assert_eq!(
        summary,
        vec![
            ("2".to_string(), "not json".to_string()),
            ("4".to_string(), "{\"time\": 2}".to_string()),
            ("5".to_string(), "\u{fffd}".to_string()),
        ]
    );
    assert!(
        letters[1].reason.contains("missing field `text`"),
        "{:?}",
        letters[1]
    );
    assert!(
        letters[2].reason.contains("invalid UTF-8"),
        "{:?}",
        letters[2]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
