//! `default_pipeline!`: the default stage list, with user stages at named points.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::parse::{Parse, ParseStream};
use syn::{braced, Attribute, Ident, Token, Visibility};

use crate::fused::{self, Call, Entry, FusedInput};
use Call::{ByRef, InPlace};

/// The default stages: (field name, insertion-point name, type path, how the fused
/// future calls it — in place for those that keep the request's type, by reference for
/// those that change it; see [`Call`]).
const DEFAULT_STAGES: [(&str, &str, &str, Call); 6] = [
    ("telemetry", "telemetry", "telemetry::Telemetry", InPlace),
    ("routing", "routing", "routing::Routing", ByRef),
    ("affinity", "affinity", "affinity::SessionAffinity", InPlace),
    ("limits", "limits", "limits::Limits", InPlace),
    ("balancing", "balancing", "balancing::LoadBalancing", ByRef),
    ("passive", "passive", "health::PassiveHealth", InPlace),
];

const POINTS: &str = "telemetry, routing, affinity, limits, balancing, passive, forwarding";

/// Index of the forwarding point: after every default stage.
const FORWARDING: usize = DEFAULT_STAGES.len();

enum Where {
    Before,
    After,
}

struct Insert {
    place: Where,
    point: Ident,
    entry: Entry,
}

/// `#[attrs] vis struct Name[(RequestType)];` or
/// `... struct Name[(RequestType)] { after routing: name: Type, ..., [=> name: Terminal] }`
pub(crate) struct DefaultInput {
    attrs: Vec<Attribute>,
    vis: Visibility,
    name: Ident,
    request: Option<syn::Type>,
    inserts: Vec<Insert>,
    terminal: Option<Entry>,
}

impl Parse for DefaultInput {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let attrs = input.call(Attribute::parse_outer)?;
        let vis: Visibility = input.parse()?;
        input.parse::<Token![struct]>()?;
        let name: Ident = input.parse()?;
        let request = if input.peek(syn::token::Paren) {
            let content;
            syn::parenthesized!(content in input);
            Some(content.parse()?)
        } else {
            None
        };
        let mut inserts = Vec::new();
        let mut terminal = None;
        if input.peek(Token![;]) {
            input.parse::<Token![;]>()?;
        } else {
            let body;
            braced!(body in input);
            while !body.is_empty() {
                if body.peek(Token![=>]) {
                    terminal = Some(fused::parse_terminal(&body)?);
                    break;
                }
                let place: Ident = body.parse()?;
                let place = match place.to_string().as_str() {
                    "before" => Where::Before,
                    "after" => Where::After,
                    _ => {
                        return Err(syn::Error::new(
                            place.span(),
                            "expected `before <point>:` or `after <point>:`",
                        ))
                    }
                };
                let point: Ident = body.parse()?;
                body.parse::<Token![:]>()?;
                let entry: Entry = body.parse()?;
                inserts.push(Insert {
                    place,
                    point,
                    entry,
                });
                if body.is_empty() {
                    break;
                }
                body.parse::<Token![,]>()?;
            }
        }
        Ok(DefaultInput {
            attrs,
            vis,
            name,
            request,
            inserts,
            terminal,
        })
    }
}

/// Position in the default list a user stage goes to: it runs before default stage `i`
/// (`i == FORWARDING`: before forwarding).
fn position(insert: &Insert) -> syn::Result<usize> {
    let point = insert.point.to_string();
    let index = match point.as_str() {
        "forwarding" => FORWARDING,
        p => DEFAULT_STAGES
            .iter()
            .position(|(_, name, _, _)| *name == p)
            .ok_or_else(|| {
                syn::Error::new(
                    insert.point.span(),
                    format!("unknown insertion point `{p}`; the points are {POINTS}"),
                )
            })?,
    };
    match insert.place {
        Where::Before => Ok(index),
        Where::After if index == FORWARDING => Err(syn::Error::new(
            insert.point.span(),
            "nothing runs after forwarding: use `before forwarding`",
        )),
        Where::After => Ok(index + 1),
    }
}

pub(crate) fn expand(input: DefaultInput) -> syn::Result<TokenStream> {
    let DefaultInput {
        attrs,
        vis,
        name,
        request,
        inserts,
        terminal,
    } = input;
    // The default stages' fields, the default terminal's, and `from_state`'s parameters
    // are taken.
    let mut reserved: Vec<(&str, &str)> = DEFAULT_STAGES
        .iter()
        .map(|(field, ..)| (*field, "is the field of a default stage"))
        .collect();
    reserved.push(("state", "is a parameter of `from_state`"));
    reserved.push((
        "http1_engine",
        "is a parameter of `from_state_with_engines`",
    ));
    reserved.push((
        "http2_engine",
        "is a parameter of `from_state_with_engines`",
    ));
    if terminal.is_none() {
        reserved.push(("forwarder", "is the field of the default forwarder"));
    }
    fused::check_names(
        inserts.iter().map(|i| &i.entry).chain(terminal.as_ref()),
        &reserved,
    )?;
    let mut slots: Vec<Vec<Entry>> = (0..=FORWARDING).map(|_| Vec::new()).collect();
    let mut user_params = Vec::new();
    let mut user_names = Vec::new();
    for insert in inserts {
        let at = position(&insert)?;
        let (n, t) = (&insert.entry.name, &insert.entry.ty);
        user_params.push(quote!(#n: #t));
        user_names.push(quote!(#n));
        slots[at].push(insert.entry);
    }
    let mut stages = Vec::new();
    let mut ctor_args = Vec::new();
    for (i, slot) in slots.into_iter().enumerate() {
        for entry in slot {
            let n = &entry.name;
            ctor_args.push(quote!(#n));
            stages.push(entry);
        }
        if let Some(&(field, _, path, call)) = DEFAULT_STAGES.get(i) {
            let field = format_ident!("{}", field);
            let ty: syn::Type = syn::parse_str(&format!("::fuseway::{path}"))?;
            ctor_args.push(if field == "telemetry" {
                quote!(::fuseway::telemetry::Telemetry::new(&state))
            } else if field == "routing" {
                quote!(::fuseway::routing::Routing::new(state))
            } else {
                quote!(<#ty as ::core::default::Default>::default())
            });
            stages.push(Entry {
                name: field,
                ty,
                call,
            });
        }
    }
    let request: syn::Type = request.unwrap_or_else(|| {
        syn::parse_quote!(::fuseway::__private::http::Request<::fuseway::body::Incoming>)
    });
    // With the default forwarder: constructors choosing its engines.
    let mut engine_args = None;
    let terminal = match terminal {
        Some(t) => {
            let (n, ty) = (&t.name, &t.ty);
            user_params.push(quote!(#n: #ty));
            ctor_args.push(quote!(#n));
            t
        }
        None => {
            let mut with_engines = ctor_args.clone();
            with_engines.push(quote!(::fuseway::forwarding::Forwarder::builder()
                .http1_engine(http1_engine)
                .http2_engine(http2_engine)
                .build()));
            engine_args = Some(with_engines);
            ctor_args.push(quote!(::fuseway::forwarding::Forwarder::new()));
            Entry {
                call: Call::ByValue,
                name: format_ident!("forwarder"),
                ty: syn::parse_quote!(::fuseway::forwarding::Forwarder<::fuseway::body::Incoming>),
            }
        }
    };
    let with_engine = engine_args.map(|args| {
        quote! {
            /// As [`from_state`](Self::from_state), the forwarder's HTTP/1.1
            /// connections to destinations on `http1_engine` (its HTTP/2 connections on
            /// the engine [`Http2Engine::from_env`](::fuseway::server::Http2Engine::from_env)
            /// names).
            #vis fn from_state_with_engine(
                state: ::std::sync::Arc<::fuseway::state::ProxyState>,
                #(#user_params,)*
                http1_engine: ::fuseway::server::Http1Engine,
            ) -> Self {
                Self::from_state_with_engines(
                    state,
                    #(#user_names,)*
                    http1_engine,
                    ::fuseway::server::Http2Engine::from_env(),
                )
            }

            /// As [`from_state`](Self::from_state), the forwarder's connections to
            /// destinations on `http1_engine` (HTTP/1.1) and `http2_engine` (HTTP/2).
            #vis fn from_state_with_engines(
                state: ::std::sync::Arc<::fuseway::state::ProxyState>,
                #(#user_params,)*
                http1_engine: ::fuseway::server::Http1Engine,
                http2_engine: ::fuseway::server::Http2Engine,
            ) -> Self {
                Self::new(#(#args),*)
            }
        }
    });
    let extra_impl = quote! {
        /// The default stages over `state`, the custom stages in the order they were
        /// declared, and the terminal (a new forwarder unless the pipeline names its own).
        #vis fn from_state(
            state: ::std::sync::Arc<::fuseway::state::ProxyState>,
            #(#user_params,)*
        ) -> Self {
            Self::new(#(#ctor_args),*)
        }

        #with_engine
    };
    Ok(fused::expand(&FusedInput {
        attrs,
        vis,
        name,
        request,
        stages,
        terminal,
        extra_impl,
    }))
}
