//! `#[derive(Outputs)]`: a struct of `Collector<T>` fields becomes a set of
//! named output channels.
//!
//! Besides the `Outputs` impl, the derive generates the channels' stream
//! handles as a typestate struct `NameStreams<C0, C1, ...>`: each channel
//! starts `Unconnected<marker, T>`; `.channel()` takes its stream and
//! `.drop_channel()` discards it, both turning it `Handled`;
//! `all_channels_handled(streams)` compiles only when every channel is `Handled`.

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Data, DeriveInput, Fields, GenericArgument, PathArguments, Type};

pub(crate) fn expand(input: TokenStream) -> TokenStream {
    match syn::parse2::<DeriveInput>(input).and_then(|input| generate(&input)) {
        Ok(tokens) => tokens,
        Err(error) => error.to_compile_error(),
    }
}

/// The `T` of a `Collector<T>` field type.
fn collector_item(ty: &Type) -> Option<&Type> {
    let Type::Path(path) = ty else { return None };
    let last = path.path.segments.last()?;
    if last.ident != "Collector" {
        return None;
    }
    let PathArguments::AngleBracketed(args) = &last.arguments else {
        return None;
    };
    match args.args.first()? {
        GenericArgument::Type(item) if args.args.len() == 1 => Some(item),
        _ => None,
    }
}

fn generate(input: &DeriveInput) -> syn::Result<TokenStream> {
    let name = &input.ident;
    let vis = &input.vis;
    if !input.generics.params.is_empty() {
        return Err(syn::Error::new(
            input.generics.span(),
            "`#[derive(Outputs)]` does not support generic structs",
        ));
    }
    let Data::Struct(data) = &input.data else {
        return Err(syn::Error::new(
            name.span(),
            "`#[derive(Outputs)]` needs a struct with one `Collector<T>` field per output channel",
        ));
    };
    let Fields::Named(fields) = &data.fields else {
        return Err(syn::Error::new(
            name.span(),
            "`#[derive(Outputs)]` needs named fields: the field names are the channel names",
        ));
    };
    let mut channels = Vec::new();
    for field in &fields.named {
        let ident = field.ident.clone().expect("named fields have names");
        let Some(item) = collector_item(&field.ty) else {
            return Err(syn::Error::new(
                field.ty.span(),
                format!("channel `{ident}` must have type `Collector<T>` for its record type `T`"),
            ));
        };
        channels.push((ident, item.clone()));
    }
    if channels.is_empty() {
        return Err(syn::Error::new(
            name.span(),
            "`#[derive(Outputs)]` needs at least one `Collector<T>` field",
        ));
    }

    let p = quote!(::streamwork::__private);
    let streams = format_ident!("{}Streams", name);
    let markers = format_ident!("__streamwork_channels_of_{}", name);
    let params: Vec<_> = (0..channels.len())
        .map(|i| format_ident!("C{}", i))
        .collect();
    let idents: Vec<_> = channels.iter().map(|(i, _)| i.clone()).collect();
    let items: Vec<_> = channels.iter().map(|(_, t)| t.clone()).collect();
    let names: Vec<String> = idents.iter().map(|i| i.to_string()).collect();
    let indices: Vec<u32> = (0..channels.len() as u32).collect();
    let unconnected: Vec<TokenStream> = idents
        .iter()
        .zip(&items)
        .map(|(i, t)| quote!(#p::Unconnected<#markers::#i, #t, __SwTm>))
        .collect();

    let mut methods = TokenStream::new();
    for (k, (ident, item)) in channels.iter().enumerate() {
        let drop_ident = format_ident!("drop_{}", ident);
        let other_params: Vec<_> = params
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != k)
            .map(|(_, p)| p.clone())
            .collect();
        let self_args: Vec<TokenStream> = params
            .iter()
            .enumerate()
            .map(|(j, param)| {
                if j == k {
                    unconnected[k].clone()
                } else {
                    quote!(#param)
                }
            })
            .collect();
        let out_args: Vec<TokenStream> = params
            .iter()
            .enumerate()
            .map(|(j, param)| {
                if j == k {
                    quote!(#p::Handled)
                } else {
                    quote!(#param)
                }
            })
            .collect();
        let rebuild: Vec<TokenStream> = idents
            .iter()
            .enumerate()
            .map(|(j, i)| {
                if j == k {
                    quote!(#i: #p::Handled)
                } else {
                    quote!(#i: self.#i)
                }
            })
            .collect();
        let take_doc = format!("Takes the stream of channel `{ident}` to connect it.");
        let drop_doc = format!("Drops channel `{ident}`: its records are discarded.");
        methods.extend(quote_spanned! {ident.span()=>
            #[allow(dead_code)]
            impl<__SwTm: #p::StreamTime, #(#other_params),*> #streams<#(#self_args),*> {
                #[doc = #take_doc]
                pub fn #ident(self) -> (#p::Stream<#item, __SwTm>, #streams<#(#out_args),*>) {
                    (self.#ident.0, #streams { #(#rebuild),* })
                }
                #[doc = #drop_doc]
                pub fn #drop_ident(self) -> #streams<#(#out_args),*> {
                    #streams { #(#rebuild),* }
                }
            }
        });
    }

    let streams_doc = format!(
        "Stream handles of the output channels of [`{name}`]; every channel must be taken or dropped before `all_channels_handled` accepts them."
    );
    Ok(quote! {
        #[doc(hidden)]
        #[allow(non_camel_case_types, non_snake_case, dead_code)]
        #vis mod #markers {
            #( #[doc(hidden)] pub struct #idents; )*
        }

        #[doc = #streams_doc]
        #[must_use = "every output channel must be connected or dropped, then checked with `all_channels_handled`"]
        #vis struct #streams<#(#params),*> {
            #( #idents: #params, )*
        }

        #methods

        impl<#(#params: #p::ChannelHandled),*> #p::AllChannelsHandled for #streams<#(#params),*> {}

        impl #p::Outputs for #name {
            type Streams<__SwTm: #p::StreamTime> = #streams<#(#unconnected),*>;

            fn channels() -> ::std::vec::Vec<#p::ChannelInfo> {
                ::std::vec![#( #p::ChannelInfo {
                    name: #names,
                    type_name: ::std::any::type_name::<#items>(),
                } ),*]
            }

            fn streams<__SwTm: #p::StreamTime>(job: #p::JobId, node: #p::NodeId) -> Self::Streams<__SwTm> {
                #streams {
                    #( #idents: #p::Unconnected(#p::Stream::__new(job, node, #indices), ::std::marker::PhantomData), )*
                }
            }

            fn assemble(parts: &mut #p::OutputParts) -> Self {
                #name { #( #idents: parts.next_collector(), )* }
            }

            #[inline]
            fn set_time(&mut self, time: ::std::option::Option<#p::Timestamp>) {
                #( self.#idents.set_time(time); )*
            }

            fn for_each_channel(&mut self, visit: &mut dyn ::std::ops::FnMut(&mut dyn #p::Channel)) {
                #( visit(&mut self.#idents); )*
            }

            fn for_each_channel_ref(&self, visit: &mut dyn ::std::ops::FnMut(&dyn #p::Channel)) {
                #( visit(&self.#idents); )*
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_non_collector_fields() {
        let out = expand(quote!(
            struct S {
                a: Vec<u8>,
            }
        ));
        assert!(out.to_string().contains("must have type `Collector<T>`"));
    }

    #[test]
    fn generates_one_take_and_drop_method_per_channel() {
        let out = expand(quote!(
            struct S {
                big: Collector<u64>,
                small: Collector<String>,
            }
        ))
        .to_string();
        assert!(out.contains("fn big"));
        assert!(out.contains("fn drop_small"));
        assert!(out.contains("AllChannelsHandled"));
    }
}
