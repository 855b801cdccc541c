//! The layout of a job run as stages: how many partitions each stage and
//! each exchange has, and under which names (checkpoint paths, topics)
//! they live in this generation of the job. Written as `LAYOUT` at the
//! root of the group's checkpoints (the store, or the shared directory),
//! so that a process started with other parallelisms finds what to rescale
//! from (see `rescale`).
//!
//! A stage or an exchange keeps its names until its partition count
//! changes; then it gets the next generation: checkpoints under
//! `STAGE@G/PARTITION`, the topic `GROUP-NAME-repartition-gG`. Generation
//! 0 has the names of a job that never rescaled (`STAGE/PARTITION`,
//! `GROUP-NAME-repartition`).

use std::fmt::Write as _;

use crate::stages::StagePlan;

/// The name of the layout object at the root of the group's checkpoints.
pub(crate) const LAYOUT: &str = "LAYOUT";
/// The first line of a layout, with its format's version.
const HEADER: &str = "streamwork-layout 1";

/// One stage in one generation of the job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct StageLayout {
    /// The stage's name (the plan's).
    pub(crate) name: String,
    /// Its partitions.
    pub(crate) partitions: u32,
    /// Its generation: changed each time its partition count did.
    pub(crate) generation: u32,
    /// The generation and partition count it was rescaled from, which its
    /// partitions restore from until they have checkpoints of their own.
    pub(crate) from: Option<(u32, u32)>,
}

impl StageLayout {
    /// Where the checkpoints of its partition `partition` are, relative to
    /// the group's checkpoints.
    pub(crate) fn path(&self, partition: u32) -> String {
        stage_path(&self.name, self.generation, partition)
    }

    /// The writer number of its partition `partition` in the exchanges it
    /// writes: distinct across generations, so that a reader's record of
    /// an old writer never stands for a new one.
    pub(crate) fn writer(&self, partition: u32) -> u32 {
        (self.generation << 16) | (partition & 0xffff)
    }
}

/// Where the checkpoints of partition `partition` of stage `name` in
/// generation `generation` are.
pub(crate) fn stage_path(name: &str, generation: u32, partition: u32) -> String {
    match generation {
        0 => format!("{name}/{partition}"),
        g => format!("{name}@{g}/{partition}"),
    }
}

/// One exchange in one generation of the job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ExchangeLayout {
    /// The exchange's name (the plan's).
    pub(crate) name: String,
    /// Its partitions.
    pub(crate) partitions: u32,
    /// Its generation: changed each time its partition count did.
    pub(crate) generation: u32,
    /// The topics of its earlier generations, oldest first.
    pub(crate) previous: Vec<String>,
}

impl ExchangeLayout {
    /// Its topic in a group `group`.
    pub(crate) fn topic(&self, group: &str) -> String {
        exchange_topic(group, &self.name, self.generation)
    }
}

/// The topic of exchange `name` in generation `generation`.
pub(crate) fn exchange_topic(group: &str, name: &str, generation: u32) -> String {
    match generation {
        0 => format!("{group}-{name}-repartition"),
        g => format!("{group}-{name}-repartition-g{g}"),
    }
}

/// The writer number the migration of generation `generation` of an
/// exchange writes old partition `partition`'s undelivered records under.
pub(crate) fn migration_writer(generation: u32, partition: u32) -> u32 {
    0x8000_0000 | ((generation & 0x7fff) << 16) | (partition & 0xffff)
}

/// A job's stages and exchanges in one generation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    /// Changed at every rescale.
    pub(crate) generation: u32,
    /// By the plan's stage order.
    pub(crate) stages: Vec<StageLayout>,
    /// By the plan's exchange order.
    pub(crate) exchanges: Vec<ExchangeLayout>,
}

impl Layout {
    /// The first layout of `plan`, whose stages that read a source have
    /// `source_partitions` partitions each (by stage; ignored for the
    /// others).
    pub(crate) fn first(plan: &StagePlan, source_partitions: &[u32]) -> Layout {
        Layout {
            generation: 0,
            stages: plan
                .stages
                .iter()
                .enumerate()
                .map(|(index, stage)| StageLayout {
                    name: stage.name.clone(),
                    partitions: stage
                        .partitions
                        .unwrap_or_else(|| source_partitions.get(index).copied().unwrap_or(1)),
                    generation: 0,
                    from: None,
                })
                .collect(),
            exchanges: plan
                .exchanges
                .iter()
                .map(|exchange| ExchangeLayout {
                    name: exchange.name.clone(),
                    partitions: exchange.partitions,
                    generation: 0,
                    previous: Vec::new(),
                })
                .collect(),
        }
    }

    /// Whether `other` (the layout the job asks for now) has the same
    /// stages and exchanges with the same partitions.
    pub(crate) fn fits(&self, other: &Layout) -> bool {
        let stages = |l: &Layout| -> Vec<(String, u32)> {
            l.stages
                .iter()
                .map(|s| (s.name.clone(), s.partitions))
                .collect()
        };
        let exchanges = |l: &Layout| -> Vec<(String, u32)> {
            l.exchanges
                .iter()
                .map(|x| (x.name.clone(), x.partitions))
                .collect()
        };
        stages(self) == stages(other) && exchanges(self) == exchanges(other)
    }

    /// Whether `wanted` is this layout with other partition counts only
    /// (the same stages and exchanges, by name).
    pub(crate) fn same_shape(&self, wanted: &Layout) -> bool {
        let names = |l: &Layout| -> (Vec<String>, Vec<String>) {
            (
                l.stages.iter().map(|s| s.name.clone()).collect(),
                l.exchanges.iter().map(|x| x.name.clone()).collect(),
            )
        };
        names(self) == names(wanted)
    }

    /// The next generation, with `wanted`'s partition counts: a stage or an
    /// exchange whose count changed gets the next generation of its own
    /// (new checkpoint paths, a new topic).
    pub(crate) fn rescaled_to(&self, wanted: &Layout) -> Layout {
        Layout {
            generation: self.generation + 1,
            stages: rescaled(
                &self.stages,
                &wanted.stages,
                |s| s.partitions,
                |old, partitions| StageLayout {
                    name: old.name.clone(),
                    partitions,
                    generation: old.generation + 1,
                    from: Some((old.generation, old.partitions)),
                },
            ),
            exchanges: rescaled(
                &self.exchanges,
                &wanted.exchanges,
                |x| x.partitions,
                |old, partitions| {
                    let mut previous = old.previous.clone();
                    previous.push(String::new());
                    ExchangeLayout {
                        name: old.name.clone(),
                        partitions,
                        generation: old.generation + 1,
                        previous,
                    }
                },
            ),
        }
    }

    /// Fills in the topics of earlier generations left blank by
    /// [`rescaled_to`](Self::rescaled_to) for a group `group`.
    pub(crate) fn name_previous(&mut self, old: &Layout, group: &str) {
        for (exchange, before) in self.exchanges.iter_mut().zip(&old.exchanges) {
            if let Some(last) = exchange.previous.last_mut()
                && last.is_empty()
            {
                *last = before.topic(group);
            }
        }
    }

    /// The layout as text (what `LAYOUT` holds).
    pub(crate) fn to_text(&self) -> String {
        let mut text = format!("{HEADER}\ngeneration\t{}\n", self.generation);
        for stage in &self.stages {
            let _ = write!(
                text,
                "stage\t{}\t{}\t{}",
                stage.name, stage.partitions, stage.generation
            );
            if let Some((generation, partitions)) = stage.from {
                let _ = write!(text, "\t{generation}\t{partitions}");
            }
            text.push('\n');
        }
        for exchange in &self.exchanges {
            let _ = write!(
                text,
                "exchange\t{}\t{}\t{}",
                exchange.name, exchange.partitions, exchange.generation
            );
            for topic in &exchange.previous {
                let _ = write!(text, "\t{topic}");
            }
            text.push('\n');
        }
        text
    }

    /// A layout from its text, or what is wrong with it.
    pub(crate) fn parse(text: &str) -> Result<Layout, LayoutUnreadable> {
        let mut lines = text.lines();
        if lines.next() != Some(HEADER) {
            return Err(LayoutUnreadable::Header);
        }
        let number = |field: Option<&str>, what: &'static str| -> Result<u32, LayoutUnreadable> {
            field
                .and_then(|f| f.parse().ok())
                .ok_or(LayoutUnreadable::Missing(what))
        };
        let mut layout = Layout {
            generation: 0,
            stages: Vec::new(),
            exchanges: Vec::new(),
        };
        // A stage's or an exchange's first fields: name, partitions, generation.
        let head = |fields: &mut std::str::Split<'_, char>, what: &'static str| {
            let name = fields.next().ok_or(LayoutUnreadable::Missing(what))?;
            let partitions = number(fields.next(), "partition count")?;
            let generation = number(fields.next(), "generation")?;
            Ok::<_, LayoutUnreadable>((name.to_string(), partitions, generation))
        };
        for line in lines {
            let mut fields = line.split('\t');
            match fields.next() {
                Some("generation") => layout.generation = number(fields.next(), "generation")?,
                Some("stage") => {
                    let (name, partitions, generation) = head(&mut fields, "stage name")?;
                    let from = match fields.next() {
                        Some(g) => Some((number(Some(g), "generation")?, {
                            number(fields.next(), "partition count")?
                        })),
                        None => None,
                    };
                    layout.stages.push(StageLayout {
                        name,
                        partitions,
                        generation,
                        from,
                    });
                }
                Some("exchange") => {
                    let (name, partitions, generation) = head(&mut fields, "exchange name")?;
                    layout.exchanges.push(ExchangeLayout {
                        name,
                        partitions,
                        generation,
                        previous: fields.map(String::from).collect(),
                    });
                }
                Some("") | None => {}
                Some(other) => return Err(LayoutUnreadable::Unknown(other.to_string())),
            }
        }
        Ok(layout)
    }
}

/// Why a `LAYOUT` file cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum LayoutUnreadable {
    /// The first line is not this version's header.
    #[error("it does not start with `{HEADER}`")]
    Header,
    /// A field is missing or not a number.
    #[error("no {0} where one is expected")]
    Missing(&'static str),
    /// A line of a kind this version does not know.
    #[error("an unknown line `{0}`")]
    Unknown(String),
}

/// `old`'s entries with `new`'s partition counts: an entry whose count is
/// unchanged is kept as it is; one whose count changed is `moved` to its
/// next generation with the new count.
fn rescaled<T: Clone>(
    old: &[T],
    new: &[T],
    partitions: impl Fn(&T) -> u32,
    moved: impl Fn(&T, u32) -> T,
) -> Vec<T> {
    old.iter()
        .zip(new)
        .map(|(old, new)| {
            if partitions(old) == partitions(new) {
                old.clone()
            } else {
                moved(old, partitions(new))
            }
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The layout of a three-stage job (lines, counted, totalled).
    pub(crate) fn layout(counted: u32, totalled: u32) -> Layout {
        Layout {
            generation: 0,
            stages: vec![
                StageLayout {
                    name: "lines".into(),
                    partitions: 4,
                    generation: 0,
                    from: None,
                },
                StageLayout {
                    name: "counted".into(),
                    partitions: counted,
                    generation: 0,
                    from: None,
                },
                StageLayout {
                    name: "totalled".into(),
                    partitions: totalled,
                    generation: 0,
                    from: None,
                },
            ],
            exchanges: vec![
                ExchangeLayout {
                    name: "counted-in".into(),
                    partitions: counted,
                    generation: 0,
                    previous: Vec::new(),
                },
                ExchangeLayout {
                    name: "totalled-in".into(),
                    partitions: totalled,
                    generation: 0,
                    previous: Vec::new(),
                },
            ],
        }
    }

    #[test]
    fn a_rescale_renames_only_what_changed_and_the_text_reads_back() {
        let first = layout(4, 3);
        let wanted = layout(2, 3);
        assert!(!first.fits(&wanted) && first.same_shape(&wanted));
        let mut second = first.rescaled_to(&wanted);
        second.name_previous(&first, "g");
        assert!(second.fits(&wanted));
        assert_eq!(second.generation, 1);
        assert_eq!(second.stages[0], first.stages[0], "lines kept");
        assert_eq!(second.stages[1].path(1), "counted@1/1");
        assert_eq!(second.stages[1].from, Some((0, 4)));
        assert_eq!(second.stages[2].path(2), "totalled/2");
        assert_eq!(
            second.exchanges[0].topic("g"),
            "g-counted-in-repartition-g1"
        );
        assert_eq!(second.exchanges[0].previous, ["g-counted-in-repartition"]);
        assert_eq!(second.exchanges[1].topic("g"), "g-totalled-in-repartition");
        assert_ne!(second.stages[1].writer(0), first.stages[1].writer(0));
        assert_eq!(
            first.stages[1].writer(3),
            3,
            "generation 0 writes as before"
        );
        let mut third = second.rescaled_to(&layout(6, 3));
        third.name_previous(&second, "g");
        assert_eq!(
            third.exchanges[0].previous,
            ["g-counted-in-repartition", "g-counted-in-repartition-g1"]
        );
        for l in [&first, &second, &third] {
            assert_eq!(Layout::parse(&l.to_text()).as_ref(), Ok(l));
        }
        assert!(Layout::parse("something else").is_err());
        assert!(Layout::parse("streamwork-layout 1\nstage\tx\tmany\t0\n").is_err());
    }
}
