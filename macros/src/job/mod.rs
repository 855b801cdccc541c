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
use syn::{Ident, LitStr};

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

/// A grouping, as written: `.shuffle()`, `.key(|r| ...)`, ...
#[derive(Clone, Debug)]
pub(crate) struct Grouping {
    pub(crate) kind: Ident,
    pub(crate) arg: Option<TokenStream>,
}

pub(crate) const GROUPINGS: &[&str] = &[
    "shuffle",
    "key",
    "fields",
    "broadcast",
    "global",
    "forward",
    "custom",
];

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
}

impl Ports {
    pub(crate) fn all(&self) -> Vec<&InputSpec> {
        match self {
            Ports::Single(inputs) => inputs.iter().collect(),
            Ports::Two { left, right } => left.iter().chain(right).collect(),
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
    pub(crate) name: Option<LitStr>,
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
