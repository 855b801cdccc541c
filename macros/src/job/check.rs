//! Structural checks of a `job!`, all collected before any is reported.

use std::collections::{HashMap, HashSet};

use super::{
    Component, FLOW_SETTINGS, GroupingName, JobSpec, Kind, Ports, StreamRef, grouping_words,
};
use crate::diag::{Diagnostics, suggest};

/// Checks `spec`; returns the components in dependency order (upstream first).
pub(crate) fn check(spec: &JobSpec, diagnostics: &mut Diagnostics) -> Vec<usize> {
    let mut index: HashMap<String, usize> = HashMap::new();
    for (i, component) in spec.components.iter().enumerate() {
        let name = component.name.to_string();
        if let Some(&first) = index.get(&name) {
            let first = &spec.components[first];
            diagnostics.error(
                component.name.span(),
                format!(
                    "duplicate component name `{name}`: a {} of that name is already declared; names must be unique",
                    first.kind.word()
                ),
            );
        } else {
            index.insert(name, i);
        }
    }
    if !spec.components.iter().any(|c| c.kind == Kind::Source) {
        diagnostics.error(
            proc_macro2::Span::call_site(),
            "this job has no source: add one, as in `source numbers = VecSource::new(vec![1, 2, 3]);`",
        );
    }

    let mut used: HashSet<(String, Option<String>)> = HashSet::new();
    let mut upstream: Vec<Vec<usize>> = vec![Vec::new(); spec.components.len()];
    for (i, component) in spec.components.iter().enumerate() {
        check_shape(component, diagnostics);
        let Some(ports) = &component.ports else {
            continue;
        };
        for input in ports.all() {
            for stream in &input.refs {
                if let Some(j) = resolve(spec, &index, stream, diagnostics) {
                    upstream[i].push(j);
                    used.insert((
                        stream.component.to_string(),
                        stream.channel.as_ref().map(|c| c.to_string()),
                    ));
                }
            }
            for setting in &input.settings {
                if setting.arg.as_ref().is_none_or(|a| a.is_empty()) {
                    diagnostics.error(
                        setting.kind.span(),
                        format!("`{}` needs an argument, as in `.capacity(4)`, `.overflow(Overflow::DropNewest)`, `.pause_sources_above(0.8, 0.5)`", setting.kind),
                    );
                }
            }
            if let Some(grouping) = &input.grouping {
                let kind = grouping.kind.to_string();
                let takes_argument = grouping.arg.as_ref().is_some_and(|a| !a.is_empty());
                match grouping.name() {
                    None => {
                        let hint =
                            suggest(&kind, grouping_words().chain(FLOW_SETTINGS.iter().copied()))
                                .map(|s| format!(" (did you mean `{s}`?)"))
                                .unwrap_or_default();
                        diagnostics.error(
                            grouping.kind.span(),
                            format!(
                                "unknown grouping `{kind}`{hint}: expected one of `shuffle`, `key(|record| ...)`, `fields(|record| ...)`, `broadcast`, `global`, `forward`, `custom(|record, n| ...)`, then optionally `capacity(n)`, `overflow(policy)`, `pause_sources_above(high, low)`"
                            ),
                        );
                    }
                    Some(name) if name.takes_function() && !takes_argument => {
                        diagnostics.error(
                            grouping.kind.span(),
                            format!(
                                "grouping `{kind}` needs a function, as in `.{kind}(|record| ...)`"
                            ),
                        );
                    }
                    Some(name) if !name.takes_function() && takes_argument => {
                        diagnostics.error(
                            grouping.kind.span(),
                            format!("grouping `{kind}` takes no argument: write `.{kind}()`"),
                        );
                    }
                    Some(_) => {}
                }
            }
        }
    }

    check_drops(spec, &index, &mut used, diagnostics);
    check_outputs_used(spec, &used, diagnostics);
    order(spec, &upstream, diagnostics)
}

fn check_shape(component: &Component, diagnostics: &mut Diagnostics) {
    let name = &component.name;
    match (component.kind, &component.ports) {
        (Kind::Source, Some(_)) => diagnostics.error(
            name.span(),
            format!("source `{name}` cannot have inputs: remove `<- ...`, or declare it as an `operator`"),
        ),
        (Kind::Operator | Kind::Sink, None) => diagnostics.error(
            name.span(),
            format!(
                "{} `{name}` has no input: connect one with `<- STREAM`, as in `{} {name} = ... <- upstream;`",
                component.kind.word(),
                component.kind.word()
            ),
        ),
        (Kind::Sink, Some(Ports::Two { .. })) => diagnostics.error(
            name.span(),
            format!("sink `{name}` has one input: `left(...)`/`right(...)` are for two-input operators"),
        ),
        (Kind::Sink, Some(Ports::Typed(_))) => diagnostics.error(
            name.span(),
            format!("sink `{name}` has one input: `port(...)` is for operators with inputs of several types"),
        ),
        _ => {}
    }
    if component.kind == Kind::Sink && component.channels.is_some() {
        diagnostics.error(
            name.span(),
            format!("sink `{name}` has no output channels to declare"),
        );
    }
    if let Some(channels) = &component.channels {
        let mut seen = HashSet::new();
        for channel in channels {
            if !seen.insert(channel.to_string()) {
                diagnostics.error(
                    channel.span(),
                    format!("channel `{channel}` is declared twice"),
                );
            }
            if GroupingName::of(channel).is_some() {
                diagnostics.error(
                    channel.span(),
                    format!("`{channel}` is a grouping and cannot name a channel"),
                );
            }
        }
        if channels.is_empty() {
            diagnostics.error(
                name.span(),
                "declare at least one channel between `{ }`, or remove them",
            );
        }
    }
}

/// Resolves a reference to a component's output, reporting what is wrong.
fn resolve(
    spec: &JobSpec,
    index: &HashMap<String, usize>,
    stream: &StreamRef,
    diagnostics: &mut Diagnostics,
) -> Option<usize> {
    let name = stream.component.to_string();
    let Some(&j) = index.get(&name) else {
        let hint = suggest(&name, index.keys().map(String::as_str))
            .map(|s| format!(" (did you mean `{s}`?)"))
            .unwrap_or_default();
        diagnostics.error(
            stream.component.span(),
            format!("unknown stream `{name}`{hint}: no source or operator of that name is declared in this job"),
        );
        return None;
    };
    let target = &spec.components[j];
    if target.kind == Kind::Sink {
        diagnostics.error(
            stream.component.span(),
            format!("`{name}` is a sink and has no output to read from"),
        );
        return None;
    }
    match (&target.channels, &stream.channel) {
        (Some(channels), Some(channel)) => {
            if !channels.iter().any(|c| c == channel) {
                let list = channels
                    .iter()
                    .map(|c| format!("`{c}`"))
                    .collect::<Vec<_>>()
                    .join(", ");
                let hint = suggest(
                    &channel.to_string(),
                    channels
                        .iter()
                        .map(|c| c.to_string())
                        .collect::<Vec<_>>()
                        .iter()
                        .map(String::as_str),
                )
                .map(|s| format!(" (did you mean `{s}`?)"))
                .unwrap_or_default();
                diagnostics.error(
                    channel.span(),
                    format!(
                        "unknown channel `{channel}` of `{name}`{hint}: its channels are {list}"
                    ),
                );
                return None;
            }
        }
        (Some(channels), None) => {
            let first = &channels[0];
            diagnostics.error(
                stream.component.span(),
                format!("`{name}` has several output channels: pick one, as in `{name}.{first}`"),
            );
            return None;
        }
        (None, Some(channel)) => {
            let hint = suggest(&channel.to_string(), grouping_words())
                .map(|g| format!("; did you mean the grouping `.{g}()`?"))
                .unwrap_or_default();
            diagnostics.error(
                channel.span(),
                format!(
                    "unknown channel `{channel}`: `{name}` declares no channels{hint} (declare channels as `operator {name} {{ a, b }} = ...`)"
                ),
            );
            return None;
        }
        (None, None) => {}
    }
    Some(j)
}

fn check_drops(
    spec: &JobSpec,
    index: &HashMap<String, usize>,
    used: &mut HashSet<(String, Option<String>)>,
    diagnostics: &mut Diagnostics,
) {
    for drop in &spec.drops {
        let key = (
            drop.target.component.to_string(),
            drop.target.channel.as_ref().map(|c| c.to_string()),
        );
        if used.contains(&key) {
            diagnostics.error(
                drop.target.span(),
                format!(
                    "`{}` is both connected and dropped: remove the `drop`",
                    display(&drop.target)
                ),
            );
            continue;
        }
        if let Some(&j) = index.get(&key.0) {
            let target = &spec.components[j];
            if target.channels.is_none() && key.1.is_some() {
                let name = &key.0;
                diagnostics.error(
                    drop.target.span(),
                    format!("`{name}` has no channels: write `drop {name};`"),
                );
                continue;
            }
        }
        if resolve(spec, index, &drop.target, diagnostics).is_some() {
            used.insert(key);
        }
    }
}

fn display(stream: &StreamRef) -> String {
    match &stream.channel {
        Some(channel) => format!("{}.{channel}", stream.component),
        None => stream.component.to_string(),
    }
}

fn check_outputs_used(
    spec: &JobSpec,
    used: &HashSet<(String, Option<String>)>,
    diagnostics: &mut Diagnostics,
) {
    for component in &spec.components {
        if component.kind == Kind::Sink {
            continue;
        }
        let name = component.name.to_string();
        match &component.channels {
            Some(channels) => {
                for channel in channels {
                    if !used.contains(&(name.clone(), Some(channel.to_string()))) {
                        diagnostics.error(
                            channel.span(),
                            format!(
                                "output channel `{name}.{channel}` is never connected: connect it as an input (`<- {name}.{channel}`) or drop it explicitly (`drop {name}.{channel};`)"
                            ),
                        );
                    }
                }
            }
            None => {
                if !used.contains(&(name.clone(), None)) {
                    diagnostics.error(
                        component.name.span(),
                        format!(
                            "the output of {} `{name}` is never used: connect it as an input (`<- {name}`) or drop it explicitly (`drop {name};`)",
                            component.kind.word()
                        ),
                    );
                }
            }
        }
    }
}

/// Dependency order; reports every component on a cycle.
fn order(spec: &JobSpec, upstream: &[Vec<usize>], diagnostics: &mut Diagnostics) -> Vec<usize> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Active,
        Done,
    }
    fn visit(
        i: usize,
        upstream: &[Vec<usize>],
        marks: &mut [Mark],
        stack: &mut Vec<usize>,
        order: &mut Vec<usize>,
        cycles: &mut Vec<Vec<usize>>,
    ) {
        match marks[i] {
            Mark::Done => return,
            Mark::Active => {
                let start = stack.iter().position(|&s| s == i).unwrap_or(0);
                cycles.push(stack[start..].to_vec());
                return;
            }
            Mark::New => {}
        }
        marks[i] = Mark::Active;
        stack.push(i);
        for &j in &upstream[i] {
            visit(j, upstream, marks, stack, order, cycles);
        }
        stack.pop();
        marks[i] = Mark::Done;
        order.push(i);
    }
    let mut marks = vec![Mark::New; spec.components.len()];
    let mut order = Vec::new();
    let mut cycles = Vec::new();
    for i in 0..spec.components.len() {
        visit(
            i,
            upstream,
            &mut marks,
            &mut Vec::new(),
            &mut order,
            &mut cycles,
        );
    }
    let mut reported = HashSet::new();
    for cycle in cycles {
        let names: Vec<String> = cycle
            .iter()
            .rev()
            .map(|&i| spec.components[i].name.to_string())
            .collect();
        let path = format!("{} -> {}", names.join(" -> "), names[0]);
        for &i in &cycle {
            if reported.insert(i) {
                let component = &spec.components[i];
                diagnostics.error(
                    component.name.span(),
                    format!(
                        "`{}` is part of a cycle ({path}): a job must be a DAG, so remove one of these inputs",
                        component.name
                    ),
                );
            }
        }
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    fn errors(tokens: proc_macro2::TokenStream) -> Vec<String> {
        let spec: JobSpec = syn::parse2(tokens).unwrap();
        let mut d = Diagnostics::default();
        check(&spec, &mut d);
        d.messages()
    }

    #[test]
    fn reports_every_problem_at_once() {
        let e = errors(quote! {
            source a = S;
            source a = S;
            operator b = O <- c;
            sink d = K <- b;
        });
        assert!(
            e.iter()
                .any(|m| m.starts_with("duplicate component name `a`")),
            "{e:?}"
        );
        assert!(
            e.iter().any(|m| m.starts_with("unknown stream `c`")),
            "{e:?}"
        );
        assert!(
            e.iter()
                .any(|m| m.contains("output of source `a` is never used")),
            "{e:?}"
        );
    }

    #[test]
    fn finds_cycles() {
        let e = errors(quote! {
            source s = S;
            operator a = O <- s, b;
            operator b = O <- a;
            sink k = K <- b;
        });
        assert_eq!(
            e.iter().filter(|m| m.contains("part of a cycle")).count(),
            2,
            "{e:?}"
        );
    }

    #[test]
    fn orders_upstream_first() {
        let spec: JobSpec = syn::parse2(quote! {
            sink k = K <- b;
            operator b = O <- s;
            source s = S;
        })
        .unwrap();
        let mut d = Diagnostics::default();
        assert_eq!(check(&spec, &mut d), vec![2, 1, 0]);
        assert!(d.is_empty());
    }

    #[test]
    fn channels_must_be_known_and_handled() {
        let e = errors(quote! {
            source s = S;
            operator split { big, small } = O <- s;
            sink k = K <- split.bog;
        });
        assert!(
            e.iter()
                .any(|m| m.starts_with("unknown channel `bog` of `split` (did you mean `big`?)")),
            "{e:?}"
        );
        assert!(
            e.iter()
                .any(|m| m.starts_with("output channel `split.small` is never connected")),
            "{e:?}"
        );
    }
}
