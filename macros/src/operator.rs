//! `#[operator]`: an `Operator` implementation from a plain function or from
//! an impl block with per-instance state.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{FnArg, ImplItem, ImplItemFn, Item, ItemFn, ItemImpl, PathArguments, Type};

pub(crate) fn expand(args: TokenStream, item: TokenStream) -> TokenStream {
    let result = syn::parse2::<Item>(item.clone()).and_then(|parsed| match parsed {
        Item::Fn(function) => from_fn(args, function),
        Item::Impl(block) => from_impl(args, block),
        other => Err(syn::Error::new(
            other.span(),
            "`#[operator]` goes on a function `fn name(value: In, out: &mut Out)` or on an impl block with `fn on_record`",
        )),
    });
    match result {
        Ok(tokens) => tokens,
        // Hand the item back unchanged so one mistake is not buried under
        // follow-on errors.
        Err(error) => {
            let error = error.to_compile_error();
            quote!(#error #item)
        }
    }
}

/// The signature of a record handler: optional key, value, output.
struct Handler {
    key: Option<Type>,
    input: Type,
    output: Type,
}

/// `K` if `ty` is `CurrentKey<'_, K>`.
fn current_key_type(ty: &Type) -> Option<Type> {
    let Type::Path(path) = ty else { return None };
    let last = path.path.segments.last()?;
    if last.ident != "CurrentKey" {
        return None;
    }
    let PathArguments::AngleBracketed(args) = &last.arguments else {
        return None;
    };
    args.args.iter().find_map(|a| match a {
        syn::GenericArgument::Type(t) => Some(t.clone()),
        _ => None,
    })
}

/// `X` if `ty` is `&mut X`.
fn mut_ref_target(ty: &Type) -> Option<Type> {
    match ty {
        Type::Reference(r) if r.mutability.is_some() => Some((*r.elem).clone()),
        _ => None,
    }
}

fn handler(inputs: Vec<&syn::PatType>, span: Span, what: &str) -> syn::Result<Handler> {
    let usage = format!(
        "{what} must take `(value: In, out: &mut Out)`, or `(key: CurrentKey<'_, K>, value: In, out: &mut Out)` for a keyed operator"
    );
    let (key, input, output) = match inputs.as_slice() {
        [value, out] => (None, value, out),
        [key, value, out] => {
            let Some(key) = current_key_type(&key.ty) else {
                return Err(syn::Error::new(
                    key.ty.span(),
                    format!("expected `CurrentKey<'_, K>`: {usage}"),
                ));
            };
            (Some(key), value, out)
        }
        _ => return Err(syn::Error::new(span, usage)),
    };
    let Some(output) = mut_ref_target(&output.ty) else {
        return Err(syn::Error::new(
            output.ty.span(),
            "the output parameter must be `&mut Collector<T>` or `&mut` a `#[derive(Outputs)]` struct",
        ));
    };
    Ok(Handler {
        key,
        input: (*input.ty).clone(),
        output,
    })
}

fn typed_args(inputs: &syn::punctuated::Punctuated<FnArg, syn::Token![,]>) -> Vec<&syn::PatType> {
    inputs
        .iter()
        .filter_map(|a| match a {
            FnArg::Typed(t) => Some(t),
            FnArg::Receiver(_) => None,
        })
        .collect()
}

fn key_kind(handler: &Handler) -> TokenStream {
    let p = quote!(::streamwork::__private);
    match &handler.key {
        Some(k) => quote!(#p::ByKey<#k>),
        None => quote!(#p::NoKey),
    }
}

fn camel_case(name: &str) -> String {
    name.split('_')
        .filter(|part| !part.is_empty())
        .map(|part| {
            let mut chars = part.chars();
            match chars.next() {
                Some(first) => first.to_uppercase().chain(chars).collect::<String>(),
                None => String::new(),
            }
        })
        .collect()
}

/// The attribute's arguments: `name = Type` (functions only), `event_time`,
/// and what an impl block keeps: `stateless` (nothing across records) or
/// `at_most_once` (state it does not checkpoint).
#[derive(Default)]
struct Args {
    name: Option<syn::Ident>,
    event_time: bool,
    stateless: Option<Span>,
    at_most_once: Option<Span>,
}

fn parse_args(args: TokenStream) -> syn::Result<Args> {
    let mut parsed = Args::default();
    let metas = syn::parse::Parser::parse2(
        syn::punctuated::Punctuated::<syn::Meta, syn::Token![,]>::parse_terminated,
        args,
    )?;
    for meta in metas {
        match meta {
            syn::Meta::Path(path) if path.is_ident("event_time") => parsed.event_time = true,
            syn::Meta::Path(path) if path.is_ident("stateless") => {
                parsed.stateless = Some(path.span());
            }
            syn::Meta::Path(path) if path.is_ident("at_most_once") => {
                parsed.at_most_once = Some(path.span());
            }
            syn::Meta::NameValue(nv) if nv.path.is_ident("name") => match nv.value {
                syn::Expr::Path(path) if path.path.get_ident().is_some() => {
                    parsed.name = path.path.get_ident().cloned();
                }
                other => {
                    return Err(syn::Error::new(
                        other.span(),
                        "expected a type name, as in `name = Doubler`",
                    ));
                }
            },
            other => {
                return Err(syn::Error::new(
                    other.span(),
                    "expected `name = TypeName`, `event_time`, `stateless` or `at_most_once`",
                ));
            }
        }
    }
    Ok(parsed)
}

fn time_requirement(args: &Args) -> TokenStream {
    let p = quote!(::streamwork::__private);
    if args.event_time {
        quote!(#p::EventTime)
    } else {
        quote!(#p::AnyTime)
    }
}

fn from_fn(args: TokenStream, function: ItemFn) -> syn::Result<TokenStream> {
    let p = quote!(::streamwork::__private);
    let sig = &function.sig;
    if let Some(FnArg::Receiver(r)) = sig.inputs.first() {
        return Err(syn::Error::new(
            r.span(),
            "put `#[operator]` on the impl block, not on a method",
        ));
    }
    let handler = handler(
        typed_args(&sig.inputs),
        sig.span(),
        "an `#[operator]` function",
    )?;
    let fn_name = &sig.ident;
    let args = parse_args(args)?;
    if let Some(span) = args.stateless.or(args.at_most_once) {
        return Err(syn::Error::new(
            span,
            "an `#[operator]` function is stateless already: `stateless` and `at_most_once` are for impl blocks",
        ));
    }
    let time = time_requirement(&args);
    let struct_name = args.name.clone().unwrap_or_else(|| {
        format_ident!(
            "{}",
            camel_case(&fn_name.to_string()),
            span = fn_name.span()
        )
    });
    let vis = &function.vis;
    let (input, output, key) = (&handler.input, &handler.output, key_kind(&handler));
    let call = if handler.key.is_some() {
        quote!(#fn_name(ctx.key(), value, ctx.out()))
    } else {
        quote!(#fn_name(value, ctx.out()))
    };
    let doc = format!("The operator generated by `#[operator]` from [`{fn_name}`].");
    Ok(quote! {
        #function

        #[doc = #doc]
        #[derive(Clone, Copy, Debug, Default)]
        #vis struct #struct_name;

        impl #p::Operator for #struct_name {
            type In = #input;
            type Key = #key;
            type Out = #output;
            type Time = #time;

            fn statefulness(&self) -> #p::Statefulness {
                #p::Statefulness::Stateless
            }

            #[inline]
            fn on_record(&mut self, value: #input, ctx: &mut #p::Context<'_, #key, #output>) {
                #call
            }
        }
    })
}

fn method<'a>(block: &'a ItemImpl, name: &str) -> Option<&'a ImplItemFn> {
    block.items.iter().find_map(|item| match item {
        ImplItem::Fn(f) if f.sig.ident == name => Some(f),
        _ => None,
    })
}

fn from_impl(args: TokenStream, block: ItemImpl) -> syn::Result<TokenStream> {
    let p = quote!(::streamwork::__private);
    if let Some((_, path, _)) = &block.trait_ {
        return Err(syn::Error::new(
            path.span(),
            "`#[operator]` goes on an inherent impl block (`impl MyOperator { fn on_record(..) }`), not on a trait impl",
        ));
    }
    let args = parse_args(args)?;
    if let Some(name) = &args.name {
        return Err(syn::Error::new(
            name.span(),
            "`name = ...` is for functions: an impl block's operator is its own type",
        ));
    }
    let time = time_requirement(&args);
    let Some(on_record) = method(&block, "on_record") else {
        return Err(syn::Error::new(
            block.self_ty.span(),
            "an `#[operator]` impl block needs `fn on_record(&mut self, value: In, out: &mut Out)`",
        ));
    };
    let handler = handler(
        typed_args(&on_record.sig.inputs),
        on_record.sig.span(),
        "`on_record`",
    )?;
    let self_ty = &block.self_ty;
    let (generics, where_clause) = (&block.generics, &block.generics.where_clause);
    let (input, output, key) = (&handler.input, &handler.output, key_kind(&handler));
    let call = if handler.key.is_some() {
        quote!(<#self_ty>::on_record(self, ctx.key(), value, ctx.out()))
    } else {
        quote!(<#self_ty>::on_record(self, value, ctx.out()))
    };
    // A checkpointed operator's state fields learn where they run first
    // (a stored state's memory budget asks the job's checkpoints), then
    // the operator's own `open` runs.
    let checkpointed = args.stateless.is_none() && args.at_most_once.is_none();
    let open_state = checkpointed.then(|| {
        quote_spanned! {self_ty.span()=>
            <#self_ty as #p::OperatorState>::open_state(self, ctx);
        }
    });
    let user_open = method(&block, "open").map(|f| {
        quote_spanned! {f.sig.span()=>
            <#self_ty>::open(self, ctx)
        }
    });
    let open = (open_state.is_some() || user_open.is_some()).then(|| {
        quote! {
            fn open(&mut self, ctx: &#p::InstanceContext) {
                #open_state
                #user_open
            }
        }
    });
    let on_end = method(&block, "on_end").map(|f| {
        quote_spanned! {f.sig.span()=>
            fn on_end(&mut self, out: &mut #output) {
                <#self_ty>::on_end(self, out)
            }
        }
    });
    let on_watermark = method(&block, "on_watermark").map(|f| {
        quote_spanned! {f.sig.span()=>
            fn on_watermark(&mut self, watermark: #p::Timestamp, out: &mut #output) {
                <#self_ty>::on_watermark(self, watermark, out)
            }
        }
    });
    let on_processing_time = method(&block, "on_processing_time").map(|f| {
        quote_spanned! {f.sig.span()=>
            fn on_processing_time(&mut self, now: #p::Timestamp, out: &mut #output) {
                <#self_ty>::on_processing_time(self, now, out)
            }
        }
    });
    let on_batch_end = method(&block, "on_batch_end").map(|f| {
        quote_spanned! {f.sig.span()=>
            fn on_batch_end(&mut self, out: &mut #output) {
                <#self_ty>::on_batch_end(self, out)
            }
        }
    });
    let before_barrier = method(&block, "before_barrier").map(|f| {
        quote_spanned! {f.sig.span()=>
            fn before_barrier(&mut self, out: &mut #output) {
                <#self_ty>::before_barrier(self, out)
            }
        }
    });
    let combine = method(&block, "combine").map(|f| {
        quote_spanned! {f.sig.span()=>
            const COMBINES: bool = true;

            fn combine(&self, earlier: &mut #input, later: #input) {
                <#self_ty>::combine(self, earlier, later)
            }
        }
    });
    // State is declared, never assumed: an impl block's struct is
    // checkpointed through its `#[derive(State)]`, unless it is declared
    // stateless. The calls are spanned on the type, so that a struct
    // without `#[derive(State)]` is reported there.
    if let (Some(_), Some(span)) = (args.stateless, args.at_most_once) {
        return Err(syn::Error::new(
            span,
            "`stateless` and `at_most_once` contradict each other: an operator keeps nothing across records, or keeps state it does not checkpoint",
        ));
    }
    if args.stateless.is_some() {
        refuse_mut_self_in_stateless(&block)?;
    }
    let state = match (args.stateless, args.at_most_once) {
        (Some(_), _) => quote! {
            fn statefulness(&self) -> #p::Statefulness {
                #p::Statefulness::Stateless
            }
        },
        (None, Some(_)) => quote! {
            fn statefulness(&self) -> #p::Statefulness {
                #p::Statefulness::Unchecked(
                    "it is declared `#[operator(at_most_once)]`: give its struct `#[derive(State)]` to checkpoint it",
                )
            }
        },
        (None, None) => {
            let ty_span = self_ty.span();
            let snapshot = quote_spanned! {ty_span=>
                <#self_ty as #p::OperatorState>::snapshot_state(self, ctx)
            };
            let restore = quote_spanned! {ty_span=>
                <#self_ty as #p::OperatorState>::restore_state(self, restore)
            };
            quote! {
                fn statefulness(&self) -> #p::Statefulness {
                    #p::Statefulness::Checkpointed
                }

                fn snapshot(
                    &mut self,
                    ctx: &#p::SnapshotContext,
                ) -> ::std::result::Result<::std::option::Option<#p::StateBytes>, #p::TaskError> {
                    #snapshot
                        .map(::std::option::Option::Some)
                        .map_err(|e| #p::TaskError::Snapshot(::std::string::ToString::to_string(&e)))
                }

                fn restore(
                    &mut self,
                    restore: &#p::Restore<'_>,
                ) -> ::std::result::Result<(), #p::TaskError> {
                    #restore
                        .map_err(|e| #p::TaskError::Restore(::std::string::ToString::to_string(&e)))
                }
            }
        }
    };
    Ok(quote! {
        #block

        impl #generics #p::Operator for #self_ty #where_clause {
            type In = #input;
            type Key = #key;
            type Out = #output;
            type Time = #time;

            #state

            #[inline]
            fn on_record(&mut self, value: #input, ctx: &mut #p::Context<'_, #key, #output>) {
                #call
            }

            #open
            #on_end
            #on_watermark
            #on_processing_time
            #on_batch_end
            #before_barrier
            #combine
        }
    })
}

/// A stateless operator keeps nothing across records, which the types can
/// tell: what runs per record or per tick takes `&self`, so nothing it does
/// can change what it does for the next record (`open` may take `&mut
/// self`: it prepares the instance before any record).
fn refuse_mut_self_in_stateless(block: &ItemImpl) -> syn::Result<()> {
    for name in [
        "on_record",
        "on_watermark",
        "on_processing_time",
        "on_batch_end",
        "before_barrier",
        "on_end",
    ] {
        if let Some(f) = method(block, name)
            && let Some(FnArg::Receiver(receiver)) = f.sig.inputs.first()
            && let Some(mutability) = receiver.mutability
        {
            return Err(syn::Error::new(
                mutability.span(),
                format!(
                    "a `#[operator(stateless)]` keeps nothing across records, so `{name}` takes `&self`, not `&mut self`: what it does for one record cannot change what it does for the next; to keep state across records, give the struct `#[derive(State)]` and drop `stateless`"
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn camel_cases_function_names() {
        assert_eq!(camel_case("parse_vehicle"), "ParseVehicle");
        assert_eq!(camel_case("x"), "X");
    }

    #[test]
    fn keyed_when_first_parameter_is_current_key() {
        let out = expand(
            TokenStream::new(),
            quote!(
                fn count(key: CurrentKey<'_, String>, v: u64, out: &mut Collector<u64>) {}
            ),
        )
        .to_string();
        assert!(out.contains("ByKey < String >"), "{out}");
    }

    #[test]
    fn a_stateless_operator_taking_mut_self_per_record_is_refused() {
        let out = expand(
            quote!(stateless),
            quote!(impl Counter { fn on_record(&mut self, v: u64, out: &mut Collector<u64>) {} }),
        )
        .to_string();
        assert!(out.contains("takes `&self`, not `&mut self`"), "{out}");
        let out = expand(
            quote!(stateless),
            quote!(impl Tag {
                fn open(&mut self, ctx: &InstanceContext) {}
                fn on_record(&self, v: u64, out: &mut Collector<u64>) {}
            }),
        )
        .to_string();
        assert!(!out.contains("compile_error"), "{out}");
    }

    #[test]
    fn an_impl_block_with_combine_declares_a_combiner() {
        let block = |extra: TokenStream| {
            expand(
                TokenStream::new(),
                quote!(impl Counts {
                    fn on_record(&mut self, key: CurrentKey<'_, u64>, v: (u64, u64), out: &mut Collector<u64>) {}
                    #extra
                }),
            )
            .to_string()
        };
        let with = block(quote!(
            fn combine(&self, earlier: &mut (u64, u64), later: (u64, u64)) {}
        ));
        assert!(with.contains("const COMBINES : bool = true"), "{with}");
        assert!(with.contains("fn combine"), "{with}");
        let without = block(TokenStream::new());
        assert!(!without.contains("COMBINES"), "{without}");
    }

    #[test]
    fn explains_a_missing_on_record() {
        let out = expand(
            TokenStream::new(),
            quote!(impl Counter { fn other(&mut self) {} }),
        )
        .to_string();
        assert!(out.contains("needs `fn on_record"));
    }
}
