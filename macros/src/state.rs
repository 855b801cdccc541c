//! `#[derive(State)]`: an operator struct whose state the framework
//! checkpoints. Every named field is a `StateField` (a keyed kind, or an
//! `InstanceState<T>`) unless marked `#[state(transient)]`; the struct may
//! say which fields of an older snapshot to forget, `#[state(forget("old"))]`.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Attribute, Data, DeriveInput, Fields, LitStr};

pub(crate) fn expand(input: TokenStream) -> TokenStream {
    match syn::parse2::<DeriveInput>(input).and_then(|input| generate(&input)) {
        Ok(tokens) => tokens,
        Err(error) => error.to_compile_error(),
    }
}

/// What a field's `#[state(...)]` says.
fn is_transient(attrs: &[Attribute]) -> syn::Result<bool> {
    let mut transient = false;
    for attr in attrs.iter().filter(|a| a.path().is_ident("state")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("transient") {
                transient = true;
                Ok(())
            } else {
                Err(meta.error(
                    "expected `transient`: `#[state(transient)]` leaves the field out of checkpoints",
                ))
            }
        })?;
    }
    Ok(transient)
}

/// The field names of an older snapshot the struct forgets.
fn forgotten(attrs: &[Attribute]) -> syn::Result<Vec<LitStr>> {
    let mut forget = Vec::new();
    for attr in attrs.iter().filter(|a| a.path().is_ident("state")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("forget") {
                let content;
                syn::parenthesized!(content in meta.input);
                let names =
                    content.parse_terminated(|input| input.parse::<LitStr>(), syn::Token![,])?;
                forget.extend(names);
                Ok(())
            } else {
                Err(meta.error(
                    "expected `forget(\"field\", ...)`: the fields of an older snapshot this struct no longer has",
                ))
            }
        })?;
    }
    Ok(forget)
}

fn generate(input: &DeriveInput) -> syn::Result<TokenStream> {
    let p = quote!(::streamwork::__private);
    let name = &input.ident;
    let Data::Struct(data) = &input.data else {
        return Err(syn::Error::new(
            name.span(),
            "`#[derive(State)]` needs a struct: its fields are the operator's state",
        ));
    };
    let fields: Vec<_> = match &data.fields {
        Fields::Named(named) => named.named.iter().collect(),
        Fields::Unit => Vec::new(),
        Fields::Unnamed(unnamed) => {
            return Err(syn::Error::new(
                unnamed.span(),
                "`#[derive(State)]` needs named fields: a snapshot holds each field by name",
            ));
        }
    };
    let forget = forgotten(&input.attrs)?;
    let mut opens = Vec::new();
    let mut snapshots = Vec::new();
    let mut restores = Vec::new();
    let mut known = Vec::new();
    let mut bounds = Vec::new();
    let mut transient_checks = Vec::new();
    for field in fields {
        if is_transient(&field.attrs)? {
            // A state kind left out of checkpoints holds state across
            // records that a restore would not bring back: refused, where
            // the types can tell (a struct without generic parameters).
            if input.generics.params.is_empty() {
                let ty = &field.ty;
                transient_checks.push(quote_spanned! {ty.span()=>
                    <#ty as transient_field_is_a_state_kind_that_checkpoints_leave_out<_>>::check();
                });
            }
            continue;
        }
        let ident = field.ident.clone().expect("named fields have names");
        let ty = &field.ty;
        let key = LitStr::new(&ident.to_string(), ident.span());
        opens.push(quote_spanned! {ty.span()=>
            #p::StateField::open_field(&mut self.#ident, ctx);
        });
        snapshots.push(quote_spanned! {ty.span()=>
            #p::StateField::snapshot_into(&mut self.#ident, #key, &mut __sw_fields, ctx)?;
        });
        restores.push(quote_spanned! {ty.span()=>
            #p::StateField::restore_from(&mut self.#ident, #key, &__sw_fields)?;
        });
        bounds.push(quote_spanned!(ty.span()=> #ty: #p::StateField));
        known.push(key);
    }
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    // Generic structs need their fields' bounds; a concrete field type is
    // checked where it is used, so that an error points at the field.
    let where_clause = if input.generics.params.is_empty() {
        quote!(#where_clause)
    } else {
        let existing = where_clause.map(|w| {
            let predicates = &w.predicates;
            quote!(#predicates,)
        });
        quote!(where #existing #(#bounds),*)
    };
    let transient_checks = (!transient_checks.is_empty()).then(|| {
        quote! {
            #[allow(non_camel_case_types, dead_code)]
            const _: () = {
                // Both impls apply to a state kind, and the call below is
                // then ambiguous: a compile error naming the trait.
                trait transient_field_is_a_state_kind_that_checkpoints_leave_out<A> {
                    fn check() {}
                }
                impl<T: ?::std::marker::Sized> transient_field_is_a_state_kind_that_checkpoints_leave_out<()> for T {}
                struct IsStateKind;
                impl<T: ?::std::marker::Sized + #p::StateField>
                    transient_field_is_a_state_kind_that_checkpoints_leave_out<IsStateKind> for T {}
                fn checks() {
                    #(#transient_checks)*
                }
            };
        }
    });
    Ok(quote! {
        #transient_checks

        impl #impl_generics #p::OperatorState for #name #ty_generics #where_clause {
            fn open_state(&mut self, ctx: &#p::InstanceContext) {
                #(#opens)*
            }

            fn snapshot_state(
                &mut self,
                ctx: &#p::SnapshotContext,
            ) -> ::std::result::Result<#p::StateBytes, #p::StateError> {
                let mut __sw_fields = #p::FieldsWriter::new();
                #(#snapshots)*
                ::std::result::Result::Ok(__sw_fields.finish())
            }

            fn restore_state(
                &mut self,
                restore: &#p::Restore<'_>,
            ) -> ::std::result::Result<(), #p::StateError> {
                let __sw_fields = #p::FieldsReader::read(restore)?;
                #(#restores)*
                __sw_fields.only(&[#(#known),*], &[#(#forget),*])
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshots_every_field_but_the_transient_ones() {
        let out = expand(quote!(
            struct Counts {
                counts: KeyedState<String, u64>,
                #[state(transient)]
                cache: Vec<u8>,
            }
        ))
        .to_string();
        assert!(out.contains("\"counts\""), "{out}");
        assert!(!out.contains("\"cache\""), "{out}");
    }

    #[test]
    fn forgets_what_the_struct_says() {
        let out = expand(quote!(
            #[state(forget("old"))]
            struct Counts {
                counts: KeyedState<String, u64>,
            }
        ))
        .to_string();
        assert!(out.contains("\"old\""), "{out}");
    }

    #[test]
    fn refuses_tuple_structs() {
        let out = expand(quote!(
            struct Counts(KeyedState<String, u64>);
        ))
        .to_string();
        assert!(out.contains("needs named fields"), "{out}");
    }

    #[test]
    fn refuses_an_unknown_field_attribute() {
        let out = expand(quote!(
            struct Counts {
                #[state(temporary)]
                counts: KeyedState<String, u64>,
            }
        ))
        .to_string();
        assert!(out.contains("expected `transient`"), "{out}");
    }
}
