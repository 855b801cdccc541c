//! A `job!` cut into stages at its keyed exchanges and run stage by stage,
//! partition by partition, each exchange through an in-memory partitioned
//! log: the same results as the job run whole. No Kafka: what the runtime
//! does with the graph, deterministically (see `tests/kafka_stages.rs` for
//! the same across processes through Kafka).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use streamwork::prelude::*;
use streamwork::runtime::cut::Envelope;
use streamwork::scaleout::stages::{ExchangePlan, StagePlan};

/// An in-memory partitioned log.
struct Log<T> {
    name: String,
    partitions: Arc<Mutex<Vec<Vec<T>>>>,
}

impl<T> Clone for Log<T> {
    fn clone(&self) -> Self {
        Log {
            name: self.name.clone(),
            partitions: self.partitions.clone(),
        }
    }
}

impl<T: Clone> Log<T> {
    fn new(name: &str, partitions: u32) -> Self {
        Log {
            name: name.to_string(),
            partitions: Arc::new(Mutex::new(vec![Vec::new(); partitions as usize])),
        }
    }

    fn len(&self) -> usize {
        self.partitions.lock().unwrap().len()
    }
}

/// Reads the partitions of a [`Log`] it is assigned (all of them, split
/// between its instances, when nothing assigns them).
#[derive(Clone)]
struct LogSource<T> {
    log: Log<T>,
    read: Vec<(usize, usize)>,
}

impl<T: Clone> LogSource<T> {
    fn new(log: &Log<T>) -> Self {
        LogSource {
            log: log.clone(),
            read: Vec::new(),
        }
    }
}

impl<T: Data + Sync> Source for LogSource<T> {
    type Out = Collector<T>;

    fn split_input(&self) -> Option<String> {
        Some(self.log.name.clone())
    }

    fn open(&mut self, ctx: &InstanceContext) -> Result<(), ConnectorError> {
        self.read = match ctx.assigned_splits() {
            Some(assigned) => assigned.iter().map(|&p| (p as usize, 0)).collect(),
            None => (0..self.log.len())
                .filter(|p| p % ctx.parallelism() as usize == ctx.instance().0 as usize)
                .map(|p| (p, 0))
                .collect(),
        };
        Ok(())
    }

    fn poll(&mut self, out: &mut Collector<T>) -> Result<SourcePoll, ConnectorError> {
        let log = self.log.partitions.lock().unwrap();
        let mut emitted = false;
        for (partition, next) in &mut self.read {
            for value in log[*partition].iter().skip(*next).take(64) {
                out.emit(value.clone());
                *next += 1;
                emitted = true;
            }
        }
        Ok(if emitted {
            SourcePoll::Emitted
        } else {
            SourcePoll::Finished
        })
    }
}

/// Writes envelopes to the partition of their key.
#[derive(Clone)]
struct EnvelopeSink(Log<Envelope>);

impl Sink for EnvelopeSink {
    type In = Envelope;

    fn write(&mut self, record: Record<Envelope>) -> Result<(), ConnectorError> {
        let mut log = self.0.partitions.lock().unwrap();
        // The partition that owns the key's group, as a runner's sink routes.
        let partition = KeyGroups::DEFAULT.route(record.value.key_hash, log.len() as u32) as usize;
        log[partition].push(record.value);
        Ok(())
    }
}

/// An [`EnvelopeSink`] that claims exactly-once, or not, as told.
#[derive(Clone)]
struct ClaimingSink(EnvelopeSink, bool);

impl Sink for ClaimingSink {
    type In = Envelope;

    fn exactly_once(&self) -> bool {
        self.1
    }

    fn write(&mut self, record: Record<Envelope>) -> Result<(), ConnectorError> {
        self.0.write(record)
    }
}

/// How often each word was seen so far.
#[derive(Clone, Default, State)]
struct WordCounts {
    counts: KeyedState<String, u64>,
}

#[operator]
impl WordCounts {
    fn on_record(
        &mut self,
        word: CurrentKey<'_, String>,
        _seen: String,
        out: &mut Collector<(String, u64)>,
    ) {
        let count = self.counts.get_or_default(word);
        *count += 1;
        let count = *count;
        out.emit((word.get().clone(), count));
    }
}

/// How many counts of words of each first letter were seen: one per
/// occurrence, so that a count delivered twice shows.
#[derive(Clone, Default, State)]
struct LetterTotals {
    totals: KeyedState<char, u64>,
}

#[operator]
impl LetterTotals {
    fn on_record(
        &mut self,
        letter: CurrentKey<'_, char>,
        _count: (String, u64),
        out: &mut Collector<(char, u64)>,
    ) {
        let total = self.totals.get_or_default(letter);
        *total += 1;
        let total = *total;
        out.emit((*letter.get(), total));
    }
}

fn first_letter((word, _): &(String, u64)) -> char {
    word.chars().next().unwrap_or(' ')
}

/// Three stages: lines split into words; words counted (keyed by word);
/// counts totalled by first letter (keyed by letter).
fn word_totals(
    lines: LogSource<String>,
    counts: CollectSink<(String, u64)>,
    totals: CollectSink<(char, u64)>,
) -> JobGraph {
    job! {
        name "word_totals";
        source lines = lines;
        operator words = flat_map(|line: String| {
            line.split_whitespace().map(String::from).collect::<Vec<_>>()
        }) <- lines;
        operator counted[3] = WordCounts::default() <- words.key(|w: &String| w.clone());
        operator totalled[2] = LetterTotals::default() <- counted.key(first_letter);
        sink word_counts = counts <- counted;
        sink letter_totals = totals <- totalled;
    }
    .unwrap()
}

fn text(seed: u64, lines: usize) -> Vec<String> {
    let mut state = seed;
    (0..lines)
        .map(|_| {
            let mut next = || {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                state >> 33
            };
            (0..1 + next() % 7)
                .map(|_| format!("{}{}", (b'a' + (next() % 5) as u8) as char, next() % 40))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// The input in `partitions` partitions, line `i` in partition `i % n`.
fn input(lines: &[String], partitions: u32) -> Log<String> {
    let log = Log::new("lines", partitions);
    for (i, line) in lines.iter().enumerate() {
        log.partitions.lock().unwrap()[i % partitions as usize].push(line.clone());
    }
    log
}

fn last_values<K: Ord, V>(rows: Vec<(K, V)>) -> BTreeMap<K, V> {
    rows.into_iter().collect()
}

#[test]
fn a_job_run_stage_by_stage_gives_the_whole_jobs_results() {
    let lines = text(7, 2_000);
    let input_partitions = 4;

    // The whole job, in one process.
    let (whole_counts, whole_totals) = (CollectSink::new(), CollectSink::new());
    word_totals(
        LogSource::new(&input(&lines, input_partitions)),
        whole_counts.clone(),
        whole_totals.clone(),
    )
    .run()
    .unwrap();

    // The same job, stage by stage.
    let log = input(&lines, input_partitions);
    let (counts, totals) = (CollectSink::new(), CollectSink::new());
    let build = || word_totals(LogSource::new(&log), counts.clone(), totals.clone());
    let plan = StagePlan::of(&build()).unwrap();
    let names: Vec<&str> = plan.stages.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["lines", "counted", "totalled"]);
    assert_eq!(plan.stages[0].log.as_deref(), Some("lines"));
    let exchanges: Vec<(&str, u32)> = plan
        .exchanges
        .iter()
        .map(|x| (x.name.as_str(), x.partitions))
        .collect();
    assert_eq!(exchanges, [("counted-in", 3), ("totalled-in", 2)]);
    assert_eq!(
        plan.exchanges[0].log_name("wc"),
        "wc-counted-in-repartition"
    );
    let shown = plan.to_string();
    assert!(
        shown.contains("stage 1 `counted`: counted → word_counts"),
        "{shown}"
    );
    let logs: Vec<Log<Envelope>> = plan
        .exchanges
        .iter()
        .map(|x| Log::new(&x.name, x.partitions))
        .collect();
    let log_of = |x: &ExchangePlan| {
        let index = plan.exchanges.iter().position(|y| y == x).unwrap();
        logs[index].clone()
    };
    for (index, stage) in plan.stages.iter().enumerate() {
        for partition in 0..stage.partitions.unwrap_or(input_partitions) {
            let graph = plan
                .stage_job(
                    build(),
                    index,
                    partition,
                    stage.partitions.unwrap_or(input_partitions),
                    None,
                    |x| LogSource::new(&log_of(x)),
                    |x| EnvelopeSink(log_of(x)),
                )
                .unwrap();
            graph.run().unwrap();
        }
    }
    // Each record went to the partition owning its key's group, from the
    // writer of the partition it came from.
    for log in &logs {
        let partitions = log.partitions.lock().unwrap();
        for (partition, envelopes) in partitions.iter().enumerate() {
            for envelope in envelopes {
                assert_eq!(
                    KeyGroups::DEFAULT.route(envelope.key_hash, partitions.len() as u32),
                    partition as u32
                );
            }
        }
    }
    let (counts, totals) = (last_values(counts.values()), last_values(totals.values()));
    assert_eq!(counts, last_values(whole_counts.values()));
    assert_eq!(totals, last_values(whole_totals.values()));
    // And both are right.
    let mut expected = BTreeMap::<String, u64>::new();
    for word in lines.iter().flat_map(|l| l.split_whitespace()) {
        *expected.entry(word.to_string()).or_default() += 1;
    }
    assert_eq!(counts, expected);
    let mut letters = BTreeMap::<char, u64>::new();
    for (word, count) in &expected {
        *letters.entry(word.chars().next().unwrap()).or_default() += count;
    }
    assert_eq!(totals, letters);
}

fn refusal(graph: JobGraph) -> String {
    StagePlan::of(&graph).unwrap_err().to_string()
}

#[test]
fn what_cannot_run_as_stages_is_refused_by_name_with_the_fix() {
    let log = Log::<String>::new("lines", 2);
    let out = CollectSink::<String>::new();

    // A source that is not a partitioned log.
    let not_a_log = refusal(
        job! {
            source lines = VecSource::new(vec![String::from("a")]);
            operator keyed[2] = map(|s: String| s) <- lines.key(|s: &String| s.clone());
            sink out = out.clone() <- keyed;
        }
        .unwrap(),
    );
    assert!(
        not_a_log.contains("`lines` is not a partitioned log") && not_a_log.contains("KafkaSource"),
        "{not_a_log}"
    );

    // A global grouping.
    let global = refusal(
        job! {
            source lines = LogSource::new(&log);
            operator all = map(|s: String| s) <- lines.global();
            sink out = out.clone() <- all;
        }
        .unwrap(),
    );
    assert!(
        global.contains("`all` reads a global grouping") && global.contains(".key(|_| 0)"),
        "{global}"
    );

    // Two sources in one stage.
    let two = refusal(
        job! {
            source a = LogSource::new(&log);
            source b = LogSource::new(&log);
            operator both = map(|s: String| s) <- a, b;
            sink out = out.clone() <- both;
        }
        .unwrap(),
    );
    assert!(two.contains("a stage reads one source"), "{two}");

    // A keyed exchange of a watermarked stream.
    let timed = refusal(
        job! {
            source lines = LogSource::new(&log);
            operator timed = Watermarks::monotonic().timestamps(|_: &String| Timestamp::from_millis(1)) <- lines;
            operator keyed[2] = map(|s: String| s) <- timed.key(|s: &String| s.clone());
            sink out = out.clone() <- keyed;
        }
        .unwrap(),
    );
    assert!(
        timed.contains("watermarks do not cross processes"),
        "{timed}"
    );
}

/// What a stage writes into an exchange is sent only once the checkpoint
/// that covers it is complete, so a replay may compute other records: a
/// stage that merges two inputs (whose interleaving differs from run to run)
/// and writes an exchange runs as stages too.
#[test]
fn a_stage_that_merges_inputs_and_writes_an_exchange_is_planned() {
    let log = Log::<String>::new("lines", 2);
    let out = CollectSink::<String>::new();
    let merged = job! {
        source a = LogSource::new(&log);
        operator x[2] = map(|s: String| s) <- a.key(|s: &String| s.clone());
        operator y[2] = map(|s: String| s) <- a.key(|s: &String| s.len());
        operator both[2] = map(|s: String| s) <- x.key(|s: &String| s.clone()), y.key(|s: &String| s.clone());
        operator again[2] = map(|s: String| s) <- both.key(|s: &String| s.clone());
        sink out = out.clone() <- again;
    }
    .unwrap();
    let merged = StagePlan::of(&merged).unwrap();
    let both = merged
        .stages
        .iter()
        .find(|stage| stage.name == "both")
        .expect("a stage of `both`");
    assert_eq!((both.inputs.len(), both.outputs.len()), (2, 1), "{merged}");

    let rejoined = job! {
        source a = LogSource::new(&log);
        operator x[2] = map(|s: String| s) <- a.key(|s: &String| s.clone());
        operator y[2] = map(|s: String| s) <- x;
        operator both[2] = map(|s: String| s) <- x, y;
        operator again[2] = map(|s: String| s) <- both.key(|s: &String| s.clone());
        sink out = out.clone() <- again;
    }
    .unwrap();
    let rejoined = StagePlan::of(&rejoined).unwrap();
    assert_eq!(rejoined.stages.len(), 3, "{rejoined}");
}

/// The engine's cut, under the stages: a part whose boundary crosses an
/// edge that is not keyed is refused by name; a cut edge's sink keeps what
/// it claims of a delivery promise, no more; and a stage plan given another
/// job than the one it was made from is refused, not run.
#[test]
fn a_part_cut_through_an_edge_that_cannot_leave_the_process_is_refused() {
    use streamwork::core::NodeId;
    use streamwork::runtime::cut::{CutError, GraphPart};

    let log = Log::<String>::new("lines", 1);
    let graph = || {
        job! {
            source a = LogSource::new(&log);
            operator x = map(|s: String| s) <- a;
            operator y[2] = map(|s: String| s) <- x.key(|s: &String| s.clone());
            sink out = CollectSink::new() <- y;
        }
        .unwrap()
    };
    let g = graph();
    let cut = (0..g.edges().len())
        .filter(|&e| g.edges()[e].cut_ends().is_some())
        .map(|e| g.edge_name(e))
        .collect::<Vec<_>>();
    assert_eq!(cut, ["y-in"]);
    // `x` alone: its input from `a` is a forward edge, which cannot be cut.
    let part = GraphPart {
        name: "x",
        nodes: &[NodeId(1)],
        share: 0,
        shares: 1,
        link: None,
    };
    let refused = g
        .into_part(
            part,
            |_| Ok::<_, CutError>(LogSource::<Envelope>::new(&Log::new("in", 1))),
            |_| Ok::<_, CutError>(EnvelopeSink(Log::new("out", 1))),
        )
        .err()
        .expect("refused")
        .to_string();
    assert!(
        refused
            .contains("`x` reads `a` through an edge that leaves the part `x` but cannot be cut")
            && refused.contains("key the edge"),
        "{refused}"
    );

    // A cut edge's sink keeps what it claims of a delivery promise, no
    // more: one that is not exactly-once is refused by an exactly-once run.
    let write_problem = |sink_claims: bool| {
        let upstream = GraphPart {
            name: "x",
            nodes: &[NodeId(0), NodeId(1)],
            share: 0,
            shares: 1,
            link: None,
        };
        let part = graph()
            .into_part(
                upstream,
                |_| Ok::<_, CutError>(LogSource::<Envelope>::new(&Log::new("in", 1))),
                |_| Ok::<_, CutError>(ClaimingSink(EnvelopeSink(Log::new("out", 1)), sink_claims)),
            )
            .unwrap();
        let write = part
            .nodes()
            .iter()
            .find(|n| n.name() == "y-in:write")
            .expect("the cut edge ends in a sink")
            .guarantee();
        write.problem(Delivery::ExactlyOnce)
    };
    assert!(
        write_problem(false).is_some_and(|p| p.contains("neither transactional nor idempotent"))
    );
    assert_eq!(write_problem(true), None);

    // A plan of this job, given a job of another shape.
    let plan = StagePlan::of(&graph()).unwrap();
    let other = job! {
        source a = LogSource::new(&log);
        sink out = CollectSink::new() <- a;
    }
    .unwrap();
    let refused = plan
        .stage_job(
            other,
            0,
            0,
            1,
            None,
            |_| LogSource::<Envelope>::new(&Log::new("in", 1)),
            |_| EnvelopeSink(Log::new("out", 1)),
        )
        .err()
        .expect("refused")
        .to_string();
    assert!(
        refused.contains("is not the job the stage plan was made from"),
        "{refused}"
    );
}
