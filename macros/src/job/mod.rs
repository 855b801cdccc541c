//! `job!`: parse → graph IR → structural checks → codegen.
//!
//! * [`parse`]: tokens into the IR below, keeping every user token's span;
//! * [`check`]: unknown or duplicate names, cycles, missing inputs, unknown
//!   channels and groupings, outputs never used: all collected, then reported;
//! * [`codegen`]: calls to the typed builder, in dependency order, spanned so
//!   that rustc's type errors land on the user's edge.

mod check;
mod codegen;
mod parse;

use proc_macro2::{Span, TokenStream};
use syn::Ident;

/// The kind of a component, as written.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Source,
    Operator,
    Sink,
}

impl Kind {
    pub(crate) fn word(self) -> &'static str {
        match self {
            Kind::Source => "source",
            Kind::Operator => "operator",
            Kind::Sink => "sink",
        }
    }
}

/// A reference to a component's output: `name` or `name.channel`.
#[derive(Clone, Debug)]
pub(crate) struct StreamRef {
    pub(crate) component: Ident,
    pub(crate) channel: Option<Ident>,
}

impl StreamRef {
    pub(crate) fn span(&self) -> Span {
        match &self.channel {
            Some(channel) => self
                .component
                .span()
                .join(channel.span())
                .unwrap_or_else(|| channel.span()),
            None => self.component.span(),
        }
    }
}

/// A call after a stream, as written: a grouping (`.shuffle()`,
/// `.key(|r| ...)`, ...) or a flow setting (`.capacity(4)`, ...).
#[derive(Clone, Debug)]
pub(crate) struct Grouping {
    pub(crate) kind: Ident,
    pub(crate) arg: Option<TokenStream>,
}

impl Grouping {
    /// The grouping this call names, if it names one.
    pub(crate) fn name(&self) -> Option<GroupingName> {
        GroupingName::of(&self.kind)
    }
}

/// The groupings `job!` knows: the one list that parsing, checking and
/// code generation share.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum GroupingName {
    Shuffle,
    Key,
    /// `fields`: the book's name for `key`.
    Fields,
    Broadcast,
    Global,
    Forward,
    Custom,
    /// `grouped(choice)`: a grouping chosen at run time.
    Grouped,
}

impl GroupingName {
    pub(crate) const ALL: [GroupingName; 8] = [
        GroupingName::Shuffle,
        GroupingName::Key,
        GroupingName::Fields,
        GroupingName::Broadcast,
        GroupingName::Global,
        GroupingName::Forward,
        GroupingName::Custom,
        GroupingName::Grouped,
    ];

    /// As written in `job!`.
    pub(crate) fn word(self) -> &'static str {
        match self {
            GroupingName::Shuffle => "shuffle",
            GroupingName::Key => "key",
            GroupingName::Fields => "fields",
            GroupingName::Broadcast => "broadcast",
            GroupingName::Global => "global",
            GroupingName::Forward => "forward",
            GroupingName::Custom => "custom",
            GroupingName::Grouped => "grouped",
        }
    }

    /// The grouping `ident` names, if any.
    pub(crate) fn of(ident: &Ident) -> Option<Self> {
        Self::ALL.into_iter().find(|g| ident == g.word())
    }

    /// Whether it takes a function (of the record, or of the record and
    /// the number of instances).
    pub(crate) fn takes_function(self) -> bool {
        matches!(
            self,
            GroupingName::Key | GroupingName::Fields | GroupingName::Custom | GroupingName::Grouped
        )
    }

    /// The method of the builder's stream it lowers to.
    pub(crate) fn method(self) -> &'static str {
        match self {
            GroupingName::Key | GroupingName::Fields => "key_by",
            GroupingName::Custom => "partition_by",
            other => other.word(),
        }
    }
}

/// The words of every grouping.
pub(crate) fn grouping_words() -> impl Iterator<Item = &'static str> {
    GroupingName::ALL.into_iter().map(GroupingName::word)
}

/// Flow-control settings that may follow an input's grouping.
pub(crate) const FLOW_SETTINGS: &[&str] = &["capacity", "overflow", "pause_sources_above"];

/// One input of a port: one stream, or a group of streams sharing a grouping,
/// then flow-control settings of its edges.
#[derive(Clone, Debug)]
pub(crate) struct InputSpec {
    pub(crate) refs: Vec<StreamRef>,
    pub(crate) grouping: Option<Grouping>,
    pub(crate) settings: Vec<Grouping>,
    pub(crate) span: Span,
}

/// The inputs of a component.
#[derive(Clone, Debug)]
pub(crate) enum Ports {
    /// One input port (fan-in when several inputs).
    Single(Vec<InputSpec>),
    /// A two-input operator: `left(...)`, `right(...)`.
    Two {
        left: Vec<InputSpec>,
        right: Vec<InputSpec>,
    },
    /// Input ports of their own types: `port(... => INTO), ...`.
    Typed(Vec<TypedPort>),
}

/// One `port(INPUTS => INTO)`: the port's streams, and what turns one of
/// its records into the operator's input.
#[derive(Clone, Debug)]
pub(crate) struct TypedPort {
    pub(crate) inputs: Vec<InputSpec>,
    pub(crate) into: syn::Expr,
}

impl Ports {
    pub(crate) fn all(&self) -> Vec<&InputSpec> {
        match self {
            Ports::Single(inputs) => inputs.iter().collect(),
            Ports::Two { left, right } => left.iter().chain(right).collect(),
            Ports::Typed(ports) => ports.iter().flat_map(|p| &p.inputs).collect(),
        }
    }
}

/// One `source`, `operator` or `sink` statement.
#[derive(Clone, Debug)]
pub(crate) struct Component {
    pub(crate) kind: Kind,
    pub(crate) kind_span: Span,
    pub(crate) name: Ident,
    pub(crate) parallelism: Option<TokenStream>,
    pub(crate) channels: Option<Vec<Ident>>,
    pub(crate) expr: TokenStream,
    pub(crate) ports: Option<Ports>,
}

/// `drop name;` or `drop name.channel;`.
#[derive(Clone, Debug)]
pub(crate) struct DropSpec {
    pub(crate) target: StreamRef,
}

/// A whole `job!` body.
#[derive(Clone, Debug, Default)]
pub(crate) struct JobSpec {
    /// `name EXPR;`: the job's name, a literal or any expression making one.
    pub(crate) name: Option<syn::Expr>,
    /// `delivery at_most_once | at_least_once | exactly_once;`
    pub(crate) delivery: Option<Ident>,
    pub(crate) settings: Vec<(Ident, TokenStream)>,
    pub(crate) components: Vec<Component>,
    pub(crate) drops: Vec<DropSpec>,
}

pub(crate) fn expand(input: TokenStream) -> TokenStream {
    let spec = match syn::parse2::<JobSpec>(input) {
        Ok(spec) => spec,
        Err(error) => return codegen::failed(error.to_compile_error()),
    };
    let mut diagnostics = crate::diag::Diagnostics::default();
    let order = check::check(&spec, &mut diagnostics);
    if !diagnostics.is_empty() {
        return codegen::failed(diagnostics.to_tokens());
    }
    codegen::generate(&spec, &order)
}
