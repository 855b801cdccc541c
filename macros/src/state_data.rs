//! `#[state_data]`: a struct or enum the framework can keep in checkpoints
//! (`StateData`), by rkyv's derives through the facade's re-export, so that
//! a user writes one line instead of three derives and a crate path.

use proc_macro2::TokenStream;
use quote::{ToTokens, quote};
use syn::DeriveInput;

pub(crate) fn expand(args: TokenStream, item: TokenStream) -> TokenStream {
    match generate(args, item) {
        Ok(tokens) => tokens,
        Err(error) => error.to_compile_error(),
    }
}

fn generate(args: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    if !args.is_empty() {
        return Err(syn::Error::new_spanned(
            args,
            "`#[state_data]` takes no arguments: write `#[state_data]`",
        ));
    }
    let input = syn::parse2::<DeriveInput>(item)?;
    if let syn::Data::Union(union) = &input.data {
        return Err(syn::Error::new_spanned(
            union.union_token,
            "`#[state_data]` is for a struct or an enum: rkyv cannot archive a union",
        ));
    }
    let layout = layout_impl(&input);
    Ok(quote! {
        #[derive(
            ::streamwork::__private::rkyv::Archive,
            ::streamwork::__private::rkyv::Serialize,
            ::streamwork::__private::rkyv::Deserialize
        )]
        #[rkyv(crate = ::streamwork::__private::rkyv)]
        #input
        #layout
    })
}

/// `StateLayout` for the type: the fingerprint of its shape (struct or
/// enum; field and variant names in order; rkyv's attributes on them),
/// mixed with each field's type's fingerprint in order. A type parameter
/// must have a fingerprint too.
fn layout_impl(input: &DeriveInput) -> TokenStream {
    let mut shape = String::new();
    let mut field_types: Vec<&syn::Type> = Vec::new();
    let describe = |fields: &syn::Fields, shape: &mut String| {
        let (open, close) = match fields {
            syn::Fields::Named(_) => ("{", "}"),
            syn::Fields::Unnamed(_) => ("(", ")"),
            syn::Fields::Unit => ("", ""),
        };
        shape.push_str(open);
        for (i, field) in fields.iter().enumerate() {
            for attr in field.attrs.iter().filter(|a| a.path().is_ident("rkyv")) {
                shape.push('#');
                shape.push_str(&canonical(attr.meta.to_token_stream()));
            }
            match &field.ident {
                Some(name) => shape.push_str(&name.to_string()),
                None => shape.push_str(&i.to_string()),
            }
            shape.push(',');
        }
        shape.push_str(close);
    };
    push_archive_attrs(&input.attrs, &mut shape);
    match &input.data {
        syn::Data::Struct(data) => {
            shape.push_str("struct");
            describe(&data.fields, &mut shape);
            field_types.extend(data.fields.iter().map(|f| &f.ty));
        }
        syn::Data::Enum(data) => {
            shape.push_str("enum{");
            for variant in &data.variants {
                push_archive_attrs(&variant.attrs, &mut shape);
                shape.push_str(&variant.ident.to_string());
                describe(&variant.fields, &mut shape);
                shape.push(';');
                field_types.extend(variant.fields.iter().map(|f| &f.ty));
            }
            shape.push('}');
        }
        syn::Data::Union(_) => return TokenStream::new(),
    }
    let name = &input.ident;
    let mut generics = input.generics.clone();
    let params: Vec<syn::Ident> = generics.type_params().map(|p| p.ident.clone()).collect();
    {
        let clause = generics.make_where_clause();
        for param in params {
            clause
                .predicates
                .push(syn::parse_quote!(#param: ::streamwork::__private::StateLayout));
        }
    }
    let (impl_generics, type_generics, where_clause) = generics.split_for_impl();
    quote! {
        impl #impl_generics ::streamwork::__private::StateLayout for #name #type_generics #where_clause {
            const LAYOUT: u64 = {
                #[allow(unused_mut)]
                let mut layout = ::streamwork::__private::layout_of(#shape);
                #(layout = ::streamwork::__private::layout_mix(
                    layout,
                    <#field_types as ::streamwork::__private::StateLayout>::LAYOUT,
                );)*
                layout
            };
        }
    }
}

/// rkyv's arguments on a type or a variant that may change what it
/// archives (`as`, `remote`, or one this macro does not know), into
/// `shape`; those that only name, derive for or bound the archived type
/// (`derive`, `compare`, `attr`, `archived`, `resolver`, `bytecheck`, the
/// bounds, `crate`) are left out, so that adding one does not refuse the
/// checkpoints written before.
fn push_archive_attrs(attrs: &[syn::Attribute], shape: &mut String) {
    const LAYOUT_NEUTRAL: [&str; 10] = [
        "derive",
        "compare",
        "attr",
        "archived",
        "resolver",
        "bytecheck",
        "archive_bounds",
        "serialize_bounds",
        "deserialize_bounds",
        "crate",
    ];
    for attr in attrs.iter().filter(|a| a.path().is_ident("rkyv")) {
        let syn::Meta::List(list) = &attr.meta else {
            shape.push('#');
            shape.push_str(&canonical(attr.meta.to_token_stream()));
            continue;
        };
        // Split at the commas between arguments (a group is one token, so
        // commas inside one do not split): `as` is a keyword, which syn's
        // `Meta` does not parse.
        let mut arguments: Vec<Vec<proc_macro2::TokenTree>> = vec![Vec::new()];
        for token in list.tokens.clone() {
            match &token {
                proc_macro2::TokenTree::Punct(p) if p.as_char() == ',' => {
                    arguments.push(Vec::new());
                }
                _ => arguments.last_mut().expect("one at least").push(token),
            }
        }
        for argument in arguments.into_iter().filter(|a| !a.is_empty()) {
            let neutral = matches!(
                argument.first(),
                Some(proc_macro2::TokenTree::Ident(name))
                    if LAYOUT_NEUTRAL.iter().any(|neutral| name == neutral)
            );
            if !neutral {
                shape.push('#');
                shape.push_str(&canonical(argument.into_iter().collect()));
            }
        }
    }
}

/// The tokens as one string, the same for the same tokens whatever their
/// spacing in the source.
fn canonical(tokens: TokenStream) -> String {
    let mut out = String::new();
    for token in tokens {
        match token {
            proc_macro2::TokenTree::Group(group) => {
                let (open, close) = match group.delimiter() {
                    proc_macro2::Delimiter::Parenthesis => ("(", ")"),
                    proc_macro2::Delimiter::Brace => ("{", "}"),
                    proc_macro2::Delimiter::Bracket => ("[", "]"),
                    proc_macro2::Delimiter::None => ("", ""),
                };
                out.push_str(open);
                out.push_str(&canonical(group.stream()));
                out.push_str(close);
            }
            proc_macro2::TokenTree::Ident(ident) => {
                out.push_str(&ident.to_string());
                out.push(' ');
            }
            proc_macro2::TokenTree::Punct(punct) => out.push(punct.as_char()),
            proc_macro2::TokenTree::Literal(literal) => {
                out.push_str(&literal.to_string());
                out.push(' ');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_struct_gets_the_three_derives_through_the_facade() {
        let out = expand(
            quote!(),
            quote!(
                struct Count {
                    n: u64,
                }
            ),
        )
        .to_string();
        for derive in ["Archive", "Serialize", "Deserialize"] {
            assert!(
                out.contains(&format!(":: streamwork :: __private :: rkyv :: {derive}")),
                "{out}"
            );
        }
        assert!(
            out.contains("rkyv (crate = :: streamwork :: __private :: rkyv)"),
            "{out}"
        );
        assert!(out.contains("struct Count"), "{out}");
    }

    #[test]
    fn the_layout_names_fields_in_order_and_bounds_type_parameters() {
        let out = expand(
            quote!(),
            quote!(
                struct Pair<T> {
                    #[rkyv(with = Skip)]
                    a: u64,
                    b: T,
                }
            ),
        )
        .to_string();
        assert!(out.contains("StateLayout for Pair < T >"), "{out}");
        assert!(
            out.contains("T : :: streamwork :: __private :: StateLayout"),
            "{out}"
        );
        assert!(
            out.contains(r#""struct{#rkyv (with =Skip )a,b,}""#),
            "{out}"
        );
        let swapped = expand(
            quote!(),
            quote!(
                struct Pair {
                    b: u64,
                    a: u64,
                }
            ),
        )
        .to_string();
        assert!(swapped.contains(r#""struct{b,a,}""#), "{swapped}");
        let variants = expand(
            quote!(),
            quote!(
                enum E {
                    A(u8),
                    B { x: u8 },
                    C,
                }
            ),
        )
        .to_string();
        assert!(variants.contains(r#""enum{A(0,);B{x,};C;}""#), "{variants}");
    }

    #[test]
    fn rkyv_arguments_on_a_type_or_variant_that_may_change_its_archive_are_in_the_layout() {
        let shape_of = |item: TokenStream| {
            let out = expand(quote!(), item).to_string();
            let start = out.find("layout_of (\"").expect("a layout") + "layout_of (\"".len();
            out[start..start + out[start..].find('"').unwrap()].to_string()
        };
        let plain = shape_of(quote!(
            struct A {
                x: u64,
            }
        ));
        // Deriving for, comparing or naming the archived type changes
        // nothing it archives ...
        let derived = shape_of(quote!(
            #[rkyv(derive(Debug), compare(PartialEq))]
            struct A {
                x: u64,
            }
        ));
        assert_eq!(plain, derived);
        // ... archiving it as another type does.
        let remote = shape_of(quote!(
            #[rkyv(derive(Debug), as = Other)]
            struct A {
                x: u64,
            }
        ));
        assert_ne!(plain, remote);
        assert!(remote.contains("#as =Other"), "{remote}");
        let variant = shape_of(quote!(
            enum E {
                #[rkyv(as = Other)]
                A(u8),
                B,
            }
        ));
        assert!(variant.contains("#as =Other A(0,)"), "{variant}");
    }

    #[test]
    fn arguments_and_unions_are_refused_with_the_fix() {
        let out = expand(
            quote!(checked),
            quote!(
                struct A;
            ),
        )
        .to_string();
        assert!(out.contains("takes no arguments"), "{out}");
        let out = expand(quote!(), quote!(union U { a: u32 })).to_string();
        assert!(out.contains("cannot archive a union"), "{out}");
    }
}
