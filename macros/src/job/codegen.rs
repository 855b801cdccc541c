//! Lowering a checked `job!` to calls to the typed builder.
//!
//! Every edge is generated with the span of the user's input, so that when
//! rustc finds a stream of the wrong type (or an unkeyed stream feeding a
//! keyed operator) the error points at that input.

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};

use super::{InputSpec, JobSpec, Kind, Ports, StreamRef};

/// The expansion after errors: the errors, and an expression of the right
/// type so that no follow-on error buries them.
pub(crate) fn failed(errors: TokenStream) -> TokenStream {
    quote! {{
        #errors
        ::std::result::Result::<
            ::streamwork::__private::JobGraph,
            ::streamwork::__private::GraphError,
        >::Err(::streamwork::__private::GraphError::NoSource {
            job: ::std::string::String::new(),
        })
    }}
}

/// One of the macro's own variables, resolved where `job!` is called
/// (not where the user's token beside it was written), so that a job
/// written through a declarative macro finds it too.
fn internal(name: &str) -> syn::Ident {
    syn::Ident::new(name, proc_macro2::Span::call_site())
}

fn stream_var(stream: &StreamRef) -> syn::Ident {
    match &stream.channel {
        Some(channel) => format_ident!(
            "__sw_s_{}__{}",
            stream.component,
            channel,
            span = stream.component.span()
        ),
        None => format_ident!(
            "__sw_s_{}",
            stream.component,
            span = stream.component.span()
        ),
    }
}

fn grouped(input: &InputSpec) -> Vec<TokenStream> {
    let settings: TokenStream = input
        .settings
        .iter()
        .map(|s| {
            let (name, arg) = (&s.kind, s.arg.clone().unwrap_or_default());
            quote_spanned!(name.span()=> .#name(#arg))
        })
        .collect();
    grouped_only(input)
        .into_iter()
        .map(|e| quote!(#e #settings))
        .collect()
}

fn grouped_only(input: &InputSpec) -> Vec<TokenStream> {
    let vars: Vec<_> = input.refs.iter().map(stream_var).collect();
    let Some(grouping) = &input.grouping else {
        return vars.iter().map(|v| quote!(#v)).collect();
    };
    let span = grouping.kind.span();
    let method = match grouping.name() {
        Some(name) => format_ident!("{}", name.method(), span = span),
        // Checked before code generation: unreachable, but harmless.
        None => grouping.kind.clone(),
    };
    match &grouping.arg {
        Some(arg) if !arg.is_empty() => {
            let group_fn = internal("__sw_group_fn");
            if vars.len() == 1 {
                let v = &vars[0];
                vec![quote_spanned!(span=> #v.#method(#arg))]
            } else {
                vars.iter()
                    .map(|v| {
                        quote_spanned!(span=> #v.#method(::std::clone::Clone::clone(&#group_fn)))
                    })
                    .collect()
            }
        }
        _ => vars
            .iter()
            .map(|v| quote_spanned!(span=> #v.#method()))
            .collect(),
    }
}

/// The argument passed for one port's inputs.
fn port_inputs(inputs: &[InputSpec]) -> TokenStream {
    let p = quote!(::streamwork::__private);
    if let [input] = inputs
        && input.refs.len() == 1
    {
        return grouped(input).remove(0);
    }
    let mut items = Vec::new();
    let mut spans = Vec::new();
    let mut lets = Vec::new();
    for input in inputs {
        if input.refs.len() > 1
            && let Some(arg) = input.grouping.as_ref().and_then(|g| g.arg.as_ref())
        {
            lets.push(quote!(let __sw_group_fn = #arg;));
        }
        let exprs = grouped(input);
        let span = input.span;
        let converted = exprs
            .into_iter()
            .map(|e| quote_spanned!(span=> #p::IntoInputs::into_inputs(#e)));
        let group_let = lets.pop();
        items.push(quote_spanned!(span=> { #group_let ::std::vec![#(#converted),*] }));
        spans.push(span);
    }
    // Each input after the first joins through `fan_in`, which requires
    // the same time of every one: mixing watermarked and unwatermarked
    // streams is an error on the stream that differs.
    let mut items = items.into_iter();
    let first = items
        .next()
        .unwrap_or_else(|| quote!(::std::vec::Vec::new()));
    let more = items.zip(spans.into_iter().skip(1)).map(|(item, span)| {
        let fan_in = quote_spanned!(span=> ::streamwork::__private::fan_in);
        let inputs = internal("__sw_inputs");
        quote_spanned!(span=> let #inputs = #fan_in(#inputs, #item);)
    });
    quote!({
        let __sw_inputs = #first;
        #( #more )*
        __sw_inputs
    })
}

pub(crate) fn generate(spec: &JobSpec, order: &[usize]) -> TokenStream {
    let p = quote!(::streamwork::__private);
    let name = spec
        .name
        .as_ref()
        .map(|n| quote!(#n))
        .unwrap_or_else(|| quote!("job"));
    let mut body = quote!(let mut __sw_job = #p::JobBuilder::new(#name););
    // The delivery a job promises is checked on its components' types: every
    // source replayable (at least once), every sink transactional (exactly once).
    let delivery = spec.delivery.as_ref().map(|d| d.to_string());
    let replayable_sources = matches!(delivery.as_deref(), Some("at_least_once" | "exactly_once"));
    let transactional_sinks = delivery.as_deref() == Some("exactly_once");
    if let Some(mode) = &spec.delivery {
        let variant = match mode.to_string().as_str() {
            "at_least_once" => quote!(AtLeastOnce),
            "exactly_once" => quote!(ExactlyOnce),
            _ => quote!(AtMostOnce),
        };
        // `__sw_job` keeps the macro's own hygiene (so that `job!` may be
        // called from another macro); the promise keeps the user's span.
        let promise = quote_spanned!(mode.span()=> #p::Delivery::#variant);
        body.extend(quote!(__sw_job.__declare_delivery(#promise);));
    }
    for (setting, value) in &spec.settings {
        body.extend(match setting.to_string().as_str() {
            "key_groups" => {
                let groups =
                    quote_spanned!(setting.span()=> #p::KeyGroups::new(#value).unwrap_or_default());
                quote!(__sw_job.key_groups(#groups);)
            }
            _ => quote!(__sw_job.#setting(#value);),
        });
    }
    let dropped: Vec<(String, Option<String>)> = spec
        .drops
        .iter()
        .map(|d| {
            (
                d.target.component.to_string(),
                d.target.channel.as_ref().map(|c| c.to_string()),
            )
        })
        .collect();
    for &i in order {
        let component = &spec.components[i];
        let name_str = component.name.to_string();
        let raw_expr = &component.expr;
        let expr_span = component
            .expr
            .clone()
            .into_iter()
            .next()
            .map_or(component.kind_span, |t| t.span());
        let expr = match component.kind {
            Kind::Source if replayable_sources => {
                quote_spanned!(expr_span=> #p::replayable(#raw_expr))
            }
            Kind::Sink if transactional_sinks => {
                quote_spanned!(expr_span=> #p::transactional(#raw_expr))
            }
            // A bare closure is a `map`: each record becomes its result.
            Kind::Operator if is_closure(raw_expr) => {
                quote_spanned!(expr_span=> #p::map(#raw_expr))
            }
            _ => quote!(#raw_expr),
        };
        let parallelism = component
            .parallelism
            .as_ref()
            .map(|p| quote!((#p) as u32))
            // The job's `parallelism N;`, 1 without it.
            .unwrap_or_else(|| quote!(__sw_job.default_parallelism()));
        let out = format_ident!("__sw_out_{}", component.name);
        let span = component.kind_span;
        let call = match (component.kind, &component.ports) {
            (Kind::Source, _) => {
                let call = quote_spanned!(span=> source(#name_str, #parallelism, #expr));
                quote!(__sw_job.#call)
            }
            (Kind::Operator, Some(Ports::Single(inputs))) => {
                let inputs = port_inputs(inputs);
                let call = quote_spanned!(span=> operator(#name_str, #parallelism, #expr, #inputs));
                quote!(__sw_job.#call)
            }
            (Kind::Operator, Some(Ports::Two { left, right })) => {
                let (left, right) = (port_inputs(left), port_inputs(right));
                let call = quote_spanned!(span=> two_input_operator(#name_str, #parallelism, #expr, #left, #right));
                quote!(__sw_job.#call)
            }
            (Kind::Operator, Some(Ports::Typed(ports))) => {
                let p = quote!(::streamwork::__private);
                let ports = ports.iter().map(|port| {
                    let inputs = port_inputs(&port.inputs);
                    let into = &port.into;
                    let name = quote!(#into).to_string().replace(' ', "");
                    quote!(#p::InputPort::new(#name, #inputs, #into))
                });
                let call = quote_spanned!(span=> operator_with_ports(#name_str, #parallelism, #expr, ::std::vec![#(#ports),*]));
                quote!(__sw_job.#call)
            }
            (Kind::Sink, Some(Ports::Single(inputs))) => {
                let inputs = port_inputs(inputs);
                let call = quote_spanned!(span=> sink(#name_str, #parallelism, #expr, #inputs));
                quote!(__sw_job.#call)
            }
            _ => unreachable!("shapes were checked"),
        };
        if component.kind == Kind::Sink {
            body.extend(quote!(#call;));
            continue;
        }
        body.extend(quote!(let #out = #call;));
        match &component.channels {
            None if dropped.contains(&(name_str.clone(), None)) => {
                // Read by nothing, on purpose: the builder is told so.
                body.extend(quote!(__sw_job.discard(#out);));
            }
            None => {
                let var = stream_var(&StreamRef {
                    component: component.name.clone(),
                    channel: None,
                });
                body.extend(quote!(#[allow(unused_variables)] let #var = #out;));
            }
            Some(channels) => {
                body.extend(quote!(let __sw_outs = #out;));
                for channel in channels {
                    let key = (name_str.clone(), Some(channel.to_string()));
                    if dropped.contains(&key) {
                        // Read by nothing, on purpose: the builder is told so.
                        body.extend(quote!(
                            let (__sw_dropped, __sw_outs) = __sw_outs.#channel();
                            __sw_job.discard(__sw_dropped);
                        ));
                    } else {
                        let var = stream_var(&StreamRef {
                            component: component.name.clone(),
                            channel: Some(channel.clone()),
                        });
                        body.extend(quote!(#[allow(non_snake_case)] let (#var, __sw_outs) = __sw_outs.#channel();));
                    }
                }
                let span = component.name.span();
                // Resolved with the macro's own `let`s, reported at the component.
                let outs =
                    syn::Ident::new("__sw_outs", proc_macro2::Span::call_site().located_at(span));
                body.extend(quote_spanned!(span=> #p::all_channels_handled(#outs);));
            }
        }
    }
    quote!({
        // The groupings (`.key_by`, `.shuffle()`, ...) are methods of the
        // builder's `Groupings`, in scope whatever the caller imported.
        #[allow(unused_imports)]
        use #p::Groupings as _;
        #body
        __sw_job.build()
    })
}

/// Whether an operator expression is a closure (`|x| ...`, `move |x| ...`).
fn is_closure(expr: &proc_macro2::TokenStream) -> bool {
    let mut tokens = expr.clone().into_iter();
    match tokens.next() {
        Some(proc_macro2::TokenTree::Punct(p)) => p.as_char() == '|',
        Some(proc_macro2::TokenTree::Ident(i)) if i == "move" => matches!(
            tokens.next(),
            Some(proc_macro2::TokenTree::Punct(p)) if p.as_char() == '|'
        ),
        _ => false,
    }
}
