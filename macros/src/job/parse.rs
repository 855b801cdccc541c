//! Parsing `job!` into the IR. The grammar:
//!
//! ```text
//! job       := item*
//! item      := "name" EXPR ";"                      (a `&str` or `String`)
//!            | "delivery" ("at_most_once" | "at_least_once" | "exactly_once") ";"
//!            | ("parallelism" | "batch_size" | "channel_capacity" | "key_groups" | "workers" | "combiners") EXPR ";"
//!            | "source" NAME par? channels? "=" EXPR ";"
//!            | ("operator" | "sink") NAME par? channels? "=" EXPR "<-" ports ";"
//!            | "drop" NAME ("." CHANNEL)? ";"
//! par       := "[" EXPR "]"
//! channels  := "{" NAME ("," NAME)* "}"
//! ports     := inputs | "left" "(" inputs ")" "," "right" "(" inputs ")"
//!            | port ("," port)*
//! port      := "port" "(" inputs "=>" EXPR ")"
//! inputs    := input ("," input)*
//! input     := ref grouping? | "(" ref ("," ref)* ")" grouping?
//! ref       := NAME ("." CHANNEL)?
//! grouping  := "." ("shuffle" | "broadcast" | "global" | "forward") ("(" ")")?
//!            | "." ("key" | "fields" | "custom") "(" EXPR ")"
//! ```
//!
//! A component's expression runs to the first `<-` or `;` outside brackets.

use proc_macro2::{Delimiter, TokenStream, TokenTree};
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream};
use syn::{Ident, Token, braced, bracketed, parenthesized};

use super::{
    Component, DropSpec, FLOW_SETTINGS, Grouping, GroupingName, InputSpec, JobSpec, Kind, Ports,
    StreamRef, TypedPort,
};

const SETTINGS: &[&str] = &[
    "parallelism",
    "batch_size",
    "channel_capacity",
    "key_groups",
    "workers",
    "combiners",
];
const DELIVERIES: &[&str] = &["at_most_once", "at_least_once", "exactly_once"];

impl Parse for JobSpec {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let mut spec = JobSpec::default();
        while !input.is_empty() {
            let keyword: Ident = input.call(Ident::parse_any).map_err(|e| {
                syn::Error::new(
                    e.span(),
                    "expected a statement: `source`, `operator`, `sink`, `drop`, `name` or a setting",
                )
            })?;
            match keyword.to_string().as_str() {
                "name" => {
                    spec.name = Some(input.parse::<syn::Expr>()?);
                    input.parse::<Token![;]>()?;
                }
                "delivery" => {
                    let mode: Ident = input.parse()?;
                    if !DELIVERIES.contains(&mode.to_string().as_str()) {
                        let hint =
                            crate::diag::suggest(&mode.to_string(), DELIVERIES.iter().copied())
                                .map(|s| format!(" (did you mean `{s}`?)"))
                                .unwrap_or_default();
                        return Err(syn::Error::new(
                            mode.span(),
                            format!(
                                "unknown delivery `{mode}`{hint}: expected `at_most_once`, `at_least_once` or `exactly_once`"
                            ),
                        ));
                    }
                    input.parse::<Token![;]>()?;
                    spec.delivery = Some(mode);
                }
                setting if SETTINGS.contains(&setting) => {
                    let value = expression(input)?;
                    input.parse::<Token![;]>()?;
                    spec.settings.push((keyword, value));
                }
                "source" => spec
                    .components
                    .push(component(input, Kind::Source, keyword)?),
                "operator" => spec
                    .components
                    .push(component(input, Kind::Operator, keyword)?),
                "sink" => spec.components.push(component(input, Kind::Sink, keyword)?),
                "drop" => {
                    let target = stream_ref(input)?;
                    input.parse::<Token![;]>()?;
                    spec.drops.push(DropSpec { target });
                }
                other => {
                    let hint = crate::diag::suggest(
                        other,
                        ["source", "operator", "sink", "drop", "name", "delivery"]
                            .into_iter()
                            .chain(SETTINGS.iter().copied()),
                    )
                    .map(|s| format!(" (did you mean `{s}`?)"))
                    .unwrap_or_default();
                    return Err(syn::Error::new(
                        keyword.span(),
                        format!(
                            "unknown statement `{other}`{hint}: expected `source`, `operator`, `sink`, `drop`, `name`, `delivery`, `parallelism`, `batch_size`, `channel_capacity`, `key_groups`, `workers` or `combiners`"
                        ),
                    ));
                }
            }
        }
        Ok(spec)
    }
}

fn component(input: ParseStream, kind: Kind, keyword: Ident) -> syn::Result<Component> {
    let name: Ident = input.parse()?;
    let parallelism = if input.peek(syn::token::Bracket) {
        let content;
        bracketed!(content in input);
        Some(content.parse::<TokenStream>()?)
    } else {
        None
    };
    let channels = if input.peek(syn::token::Brace) {
        let content;
        braced!(content in input);
        let names = content.parse_terminated(Ident::parse, Token![,])?;
        Some(names.into_iter().collect())
    } else {
        None
    };
    input.parse::<Token![=]>().map_err(|e| {
        syn::Error::new(
            e.span(),
            format!(
                "expected `=` and the {} value after `{} {name}`",
                kind.word(),
                kind.word()
            ),
        )
    })?;
    let expr = expression(input)?;
    if expr.is_empty() {
        return Err(syn::Error::new(
            name.span(),
            format!("{} `{name}` needs a value after `=`", kind.word()),
        ));
    }
    let ports = if input.peek(Token![<]) && input.peek2(Token![-]) {
        input.parse::<Token![<]>()?;
        input.parse::<Token![-]>()?;
        Some(ports(input)?)
    } else {
        None
    };
    input.parse::<Token![;]>()?;
    Ok(Component {
        kind,
        kind_span: keyword.span(),
        name,
        parallelism,
        channels,
        expr,
        ports,
    })
}

/// Tokens up to the first top-level `;` or `<-`.
fn expression(input: ParseStream) -> syn::Result<TokenStream> {
    let at_end = |input: ParseStream| {
        input.is_empty()
            || input.peek(Token![;])
            || (input.peek(Token![<]) && input.peek2(Token![-]))
    };
    let mut tokens = TokenStream::new();
    while !at_end(input) {
        let tree: TokenTree = input.parse()?;
        tokens.extend([tree]);
    }
    Ok(tokens)
}

fn ports(input: ParseStream) -> syn::Result<Ports> {
    let fork = input.fork();
    let opening = fork
        .call(Ident::parse_any)
        .ok()
        .filter(|_| fork.peek(syn::token::Paren));
    if opening.as_ref().is_some_and(|i| i == "port") {
        return typed_ports(input);
    }
    let is_two = opening.is_some_and(|i| i == "left");
    if !is_two {
        return Ok(Ports::Single(input_list(input)?));
    }
    input.call(Ident::parse_any)?;
    let content;
    parenthesized!(content in input);
    let left = input_list(&content)?;
    input.parse::<Token![,]>()?;
    let right_kw: Ident = input.call(Ident::parse_any)?;
    if right_kw != "right" {
        return Err(syn::Error::new(
            right_kw.span(),
            "a two-input operator takes `<- left(STREAMS), right(STREAMS)`",
        ));
    }
    let content;
    parenthesized!(content in input);
    let right = input_list(&content)?;
    Ok(Ports::Two { left, right })
}

/// `port(INPUTS => INTO), ...`: one or more ports of their own types.
fn typed_ports(input: ParseStream) -> syn::Result<Ports> {
    let mut ports = Vec::new();
    loop {
        let keyword: Ident = input.call(Ident::parse_any)?;
        if keyword != "port" {
            return Err(syn::Error::new(
                keyword.span(),
                "an operator with typed ports takes `<- port(STREAMS => INTO), port(STREAMS => INTO), ...`",
            ));
        }
        let content;
        parenthesized!(content in input);
        let inputs = input_list(&content)?;
        content.parse::<Token![=>]>()?;
        let into: syn::Expr = content.parse()?;
        ports.push(TypedPort { inputs, into });
        if !input.peek(Token![,]) {
            return Ok(Ports::Typed(ports));
        }
        input.parse::<Token![,]>()?;
        if input.is_empty() || input.peek(Token![;]) {
            return Ok(Ports::Typed(ports));
        }
    }
}

fn input_list(input: ParseStream) -> syn::Result<Vec<InputSpec>> {
    let mut inputs = vec![one_input(input)?];
    while input.peek(Token![,]) {
        input.parse::<Token![,]>()?;
        if input.is_empty() || input.peek(Token![;]) {
            break;
        }
        inputs.push(one_input(input)?);
    }
    // A typed port's inputs end at its `=>`.
    if !input.is_empty() && !input.peek(Token![;]) && !input.peek(Token![=>]) {
        return Err(input.error("expected `,` or `;` after an input"));
    }
    Ok(inputs)
}

fn one_input(input: ParseStream) -> syn::Result<InputSpec> {
    let start = input.span();
    let refs = if input.peek(syn::token::Paren) {
        let content;
        parenthesized!(content in input);
        let refs = content.parse_terminated(stream_ref_no_grouping, Token![,])?;
        refs.into_iter().collect()
    } else {
        vec![stream_ref(input)?]
    };
    let mut grouping_ = None;
    let mut settings = Vec::new();
    while input.peek(Token![.]) {
        input.parse::<Token![.]>()?;
        let call = grouping(input)?;
        let name = call.kind.to_string();
        if FLOW_SETTINGS.contains(&name.as_str()) {
            settings.push(call);
        } else if grouping_.is_none() && settings.is_empty() {
            grouping_ = Some(call);
        } else {
            return Err(syn::Error::new(
                call.kind.span(),
                format!(
                    "`{name}` cannot follow here: an input takes one grouping, then `capacity(..)`, `overflow(..)` or `pause_sources_above(..)`"
                ),
            ));
        }
    }
    Ok(InputSpec {
        refs,
        grouping: grouping_,
        settings,
        span: start,
    })
}

fn is_grouping(ident: &Ident) -> bool {
    GroupingName::of(ident).is_some() || FLOW_SETTINGS.iter().any(|s| ident == s)
}

fn stream_ref_no_grouping(input: ParseStream) -> syn::Result<StreamRef> {
    let component: Ident = input.parse()?;
    let channel = if input.peek(Token![.]) {
        input.parse::<Token![.]>()?;
        Some(input.parse()?)
    } else {
        None
    };
    Ok(StreamRef { component, channel })
}

/// `name` or `name.channel`, stopping before `.grouping`.
fn stream_ref(input: ParseStream) -> syn::Result<StreamRef> {
    let component: Ident = input.parse()?;
    let mut channel = None;
    if input.peek(Token![.]) {
        let fork = input.fork();
        fork.parse::<Token![.]>()?;
        let next: Ident = fork.call(Ident::parse_any)?;
        if !is_grouping(&next) && !fork.peek(syn::token::Paren) {
            input.parse::<Token![.]>()?;
            channel = Some(input.call(Ident::parse_any)?);
        }
    }
    Ok(StreamRef { component, channel })
}

fn grouping(input: ParseStream) -> syn::Result<Grouping> {
    let kind: Ident = input.call(Ident::parse_any)?;
    let arg = if input.peek(syn::token::Paren) {
        let TokenTree::Group(group) = input.parse::<TokenTree>()? else {
            unreachable!("peeked a parenthesis")
        };
        debug_assert_eq!(group.delimiter(), Delimiter::Parenthesis);
        Some(group.stream())
    } else {
        None
    };
    Ok(Grouping { kind, arg })
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    #[test]
    fn parses_components_inputs_and_groupings() {
        let spec: JobSpec = syn::parse2(quote! {
            name "t";
            source a[2] = Gen::new(1 < 2);
            operator b { x, y } = Split <- a.key(|r: &u64| *r), a.shuffle();
            operator c = Co <- left(b.x), right((b.y, a).broadcast());
            sink d = Out <- c;
        })
        .unwrap();
        assert_eq!(spec.components.len(), 4);
        let Some(Ports::Single(inputs)) = &spec.components[1].ports else {
            panic!()
        };
        assert_eq!(inputs.len(), 2);
        assert_eq!(
            inputs[0].grouping.as_ref().unwrap().name(),
            Some(GroupingName::Key)
        );
        let Some(Ports::Two { right, .. }) = &spec.components[2].ports else {
            panic!()
        };
        assert_eq!(right[0].refs.len(), 2);
        assert_eq!(right[0].refs[0].channel.as_ref().unwrap(), "y");
    }

    #[test]
    fn expression_stops_at_arrow() {
        let spec: JobSpec = syn::parse2(quote!(operator b = Vec::<u8>::new() <- a;)).unwrap();
        assert_eq!(
            spec.components[0].expr.to_string(),
            "Vec :: < u8 > :: new ()"
        );
    }
}
