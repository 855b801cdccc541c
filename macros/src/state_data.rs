//! `#[state_data]`: a struct or enum the framework can keep in checkpoints
//! (`StateData`), by rkyv's derives through the facade's re-export, so that
//! a user writes one line instead of three derives and a crate path.

use proc_macro2::TokenStream;
use quote::quote;
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
    Ok(quote! {
        #[derive(
            ::streamwork::__private::rkyv::Archive,
            ::streamwork::__private::rkyv::Serialize,
            ::streamwork::__private::rkyv::Deserialize
        )]
        #[rkyv(crate = ::streamwork::__private::rkyv)]
        #input
    })
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
