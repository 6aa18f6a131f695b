//! `fused_pipeline!`: parsing and expansion.

use proc_macro2::{Group, Span, TokenStream, TokenTree};
use quote::{format_ident, quote, quote_spanned, ToTokens};
use syn::parse::{Parse, ParseStream};
use syn::spanned::Spanned;
use syn::{braced, parenthesized, Attribute, Ident, Token, Type, Visibility};

/// How the fused future calls a stage's `on_request`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Call {
    /// `Stage::on_request`, the request moved in and out (stages without a marker).
    ByValue,
    /// A stage that keeps the request's type (`#[in_place]`, and the built-in ones that
    /// do), called on the request where it lies: `stage::InPlace::on_request_in_place`.
    InPlace,
    /// A stage that changes the request's type (`#[by_ref]`, and the built-in routing
    /// and load balancing), called on a reference (`stage::ByRef::on_request_by_ref`)
    /// and then joined to its result (`ByRef::into_out`): one move of the request.
    ByRef,
}

/// One `name: Type` entry.
pub(crate) struct Entry {
    pub(crate) name: Ident,
    pub(crate) ty: Type,
    pub(crate) call: Call,
}

impl Parse for Entry {
    /// `[#[in_place] | #[by_ref]] name: Type`.
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let mut call = Call::ByValue;
        for attr in input.call(Attribute::parse_outer)? {
            let marker = attr.path().get_ident().map(Ident::to_string);
            call = match (marker.as_deref(), &attr.meta) {
                (Some("in_place"), syn::Meta::Path(_)) => Call::InPlace,
                (Some("by_ref"), syn::Meta::Path(_)) => Call::ByRef,
                _ => {
                    return Err(syn::Error::new_spanned(
                        &attr,
                        "a stage takes `#[in_place]` (it implements `fuseway::stage::InPlace`) or `#[by_ref]` (`fuseway::stage::ByRef`), nothing else",
                    ))
                }
            };
        }
        let name: Ident = input.parse()?;
        input.parse::<Token![:]>()?;
        let ty: Type = input.parse()?;
        Ok(Entry { name, ty, call })
    }
}

/// After a `=>`: the terminal entry, an optional comma, and nothing more.
/// Every stage (and the terminal) needs a name of its own, and none of the names
/// `reserved` takes (each with why).
pub(crate) fn check_names<'a>(
    entries: impl IntoIterator<Item = &'a Entry>,
    reserved: &[(&str, &str)],
) -> syn::Result<()> {
    let mut seen: Vec<String> = Vec::new();
    for entry in entries {
        let name = entry.name.to_string();
        if let Some((_, why)) = reserved.iter().find(|(r, _)| *r == name) {
            return Err(syn::Error::new(
                entry.name.span(),
                format!("`{name}` {why}: give this stage another name"),
            ));
        }
        if seen.contains(&name) {
            return Err(syn::Error::new(
                entry.name.span(),
                format!("two stages are named `{name}`: each needs a name of its own (it is a field of the pipeline)"),
            ));
        }
        seen.push(name);
    }
    Ok(())
}

pub(crate) fn parse_terminal(body: ParseStream<'_>) -> syn::Result<Entry> {
    body.parse::<Token![=>]>()?;
    let terminal = body.parse::<Entry>()?;
    if terminal.call != Call::ByValue {
        return Err(syn::Error::new(
            terminal.name.span(),
            "the terminal service is called as a service: `#[in_place]` and `#[by_ref]` are for stages",
        ));
    }
    if body.peek(Token![,]) {
        body.parse::<Token![,]>()?;
    }
    if !body.is_empty() {
        return Err(body.error("the terminal service (`=> name: Type`) must come last"));
    }
    Ok(terminal)
}

/// `#[attrs] vis struct Name(RequestType) { a: A, b: B, => t: T }`
pub(crate) struct FusedInput {
    pub(crate) attrs: Vec<Attribute>,
    pub(crate) vis: Visibility,
    pub(crate) name: Ident,
    pub(crate) request: Type,
    pub(crate) stages: Vec<Entry>,
    pub(crate) terminal: Entry,
    /// Extra items to emit inside `impl Name` (used by `default_pipeline!`).
    pub(crate) extra_impl: TokenStream,
}

impl Parse for FusedInput {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let attrs = input.call(Attribute::parse_outer)?;
        let vis: Visibility = input.parse()?;
        input.parse::<Token![struct]>()?;
        let name: Ident = input.parse()?;
        if !input.peek(syn::token::Paren) {
            return Err(syn::Error::new(
                name.span(),
                "expected the request type the pipeline takes: `struct Name(http::Request<B>) { ... }`",
            ));
        }
        let request_tokens;
        parenthesized!(request_tokens in input);
        let request: Type = request_tokens.parse()?;
        let body;
        let brace = braced!(body in input);
        let mut stages = Vec::new();
        let mut terminal = None;
        while !body.is_empty() {
            if body.peek(Token![=>]) {
                terminal = Some(parse_terminal(&body)?);
                break;
            }
            stages.push(body.parse::<Entry>()?);
            if body.is_empty() {
                break;
            }
            body.parse::<Token![,]>()?;
        }
        let Some(terminal) = terminal else {
            return Err(syn::Error::new(
                brace.span.close(),
                "a fused pipeline needs a terminal service: end the list with `=> forwarder: Forwarder<B>`",
            ));
        };
        if stages.is_empty() {
            return Err(syn::Error::new(
                name.span(),
                "a fused pipeline needs at least one stage before its terminal service",
            ));
        }
        check_names(stages.iter().chain([&terminal]), &[])?;
        Ok(FusedInput {
            attrs,
            vis,
            name,
            request,
            stages,
            terminal,
            extra_impl: TokenStream::new(),
        })
    }
}

pub(crate) fn expand(input: &FusedInput) -> TokenStream {
    let FusedInput {
        attrs,
        vis,
        name,
        request,
        stages,
        terminal,
        extra_impl,
    } = input;
    let n = stages.len();
    let fw = quote_spanned!(name.span()=> ::fuseway);
    let p = quote_spanned!(name.span()=> ::fuseway::__private);
    let stages_name = format_ident!("{}Stages", name, span = name.span());
    let future_name = format_ident!("{}Future", name, span = name.span());

    // In{k}: what stage k takes (In{n}: what the terminal takes). St{k}: stage k's state.
    // Everything about stage k — the aliases' names included, since rustc reports a
    // failing projection where the alias is used — carries one span, its type's own
    // name: a type error is reported there, and once (rustc drops a repeat of the same
    // error at the same span).
    let spans: Vec<Span> = stages.iter().map(|s| own_span(&s.ty)).collect();
    let tspan = own_span(&terminal.ty);
    // The stages' types with every token at that span (a type's own tokens keep theirs,
    // and rustc reports a failed trait call at the type's).
    let at: Vec<TokenStream> = stages
        .iter()
        .zip(&spans)
        .map(|(s, span)| respan(s.ty.to_token_stream(), *span))
        .collect();
    let tty_at = respan(terminal.ty.to_token_stream(), tspan);
    let in_alias: Vec<Ident> = (0..=n)
        .map(|k| {
            let span = match k {
                0 => request.span(),
                k => spans[k - 1],
            };
            format_ident!("__{}In{}", name, k, span = span)
        })
        .collect();
    let st_alias: Vec<Ident> = (0..n)
        .map(|k| format_ident!("__{}St{}", name, k, span = spans[k]))
        .collect();
    let in0 = &in_alias[0];
    let mut aliases = vec![quote! {
        #[doc(hidden)]
        #[allow(non_camel_case_types)]
        #vis type #in0 = #request;
    }];
    for (k, ty) in at.iter().enumerate() {
        let (this_in, next_in, st) = (&in_alias[k], &in_alias[k + 1], &st_alias[k]);
        aliases.push(quote_spanned! {spans[k]=>
            #[doc(hidden)]
            #[allow(non_camel_case_types)]
            #vis type #next_in = <#ty as #fw::stage::Stage<#this_in>>::Out;
            #[doc(hidden)]
            #[allow(non_camel_case_types)]
            #vis type #st = <#ty as #fw::stage::Stage<#this_in>>::State;
        });
    }
    let tty = &terminal.ty;
    let last_in = &in_alias[n];
    let terminal_trait = quote_spanned!(tspan=> <#tty_at as #fw::pipeline::Terminal<#last_in>>);
    let terminal_future = quote_spanned!(tspan=> #terminal_trait::Future);
    let terminal_error = quote_spanned!(tspan=> #terminal_trait::Error);

    let names: Vec<&Ident> = stages.iter().map(|s| &s.name).collect();
    let types: Vec<&Type> = stages.iter().map(|s| &s.ty).collect();
    let tname = &terminal.name;
    // Uses of the state aliases, spanned at their stage.
    let st_uses: Vec<TokenStream> = st_alias
        .iter()
        .zip(&spans)
        .map(|(st, span)| quote_spanned!(*span=> #st))
        .collect();

    // on_response of stage j, spanned at its type.
    let on_response = |j: usize| {
        let (sj, nj, inj, ty) = (
            format_ident!("__s{}", j, span = spans[j]),
            names[j],
            &in_alias[j],
            &at[j],
        );
        quote_spanned! {spans[j]=>
            <#ty as #fw::stage::Stage<#inj>>::on_response(&__stages.#nj, #sj, __response);
        }
    };

    // call: each stage's on_request in order; an early answer runs the earlier stages'
    // on_response (last first) and returns a ready future.
    let mut call_steps = Vec::new();
    // The variable holding the request as it goes from stage to stage.
    let mut x_in = format_ident!("__x0", span = request.span());
    for k in 0..n {
        let (stage, ty, this_in) = (names[k], &at[k], &in_alias[k]);
        let (x_out, s) = (
            format_ident!("__x{}", k + 1, span = spans[k]),
            format_ident!("__s{}", k, span = spans[k]),
        );
        let unwind: Vec<TokenStream> = (0..k).rev().map(on_response).collect();
        let answered = quote_spanned! {spans[k]=>
            ::core::result::Result::Err(mut __answer) => {
                let __response = &mut __answer;
                #(#unwind)*
                return #fw::pipeline::FusedFuture::answered(__answer);
            }
        };
        match stages[k].call {
            Call::InPlace => call_steps.push(quote_spanned! {spans[k]=>
                let #s = match <#ty as #fw::stage::InPlace<#this_in>>::on_request_in_place(&__stages.#stage, &mut #x_in) {
                    ::core::result::Result::Ok(v) => v,
                    #answered
                };
            }),
            Call::ByRef => {
                call_steps.push(quote_spanned! {spans[k]=>
                    #[allow(unused_mut)]
                    let (mut #x_out, #s) = match <#ty as #fw::stage::ByRef<#this_in>>::on_request_by_ref(&__stages.#stage, &#x_in) {
                        ::core::result::Result::Ok((__extra, __state)) => (<#ty as #fw::stage::ByRef<#this_in>>::into_out(#x_in, __extra), __state),
                        #answered
                    };
                });
                x_in = x_out;
            }
            Call::ByValue => {
                call_steps.push(quote_spanned! {spans[k]=>
                    #[allow(unused_mut)]
                    let (mut #x_out, #s) = match <#ty as #fw::stage::Stage<#this_in>>::on_request(&__stages.#stage, #x_in) {
                        ::core::result::Result::Ok(v) => v,
                        #answered
                    };
                });
                x_in = x_out;
            }
        }
    }
    let unwind_all: Vec<TokenStream> = (0..n).rev().map(on_response).collect();
    let terminal_call =
        quote_spanned!(tspan=> #terminal_trait::call_terminal(&__stages.#tname, #x_in));
    let ss: Vec<Ident> = (0..n)
        .map(|k| format_ident!("__s{}", k, span = spans[k]))
        .collect();
    let x0 = format_ident!("__x0", span = request.span());

    let doc_future = format!(
        "The one future of [`{name}`]: the terminal service's future plus the state of every stage."
    );
    let doc_stages = format!("The stages of [`{name}`], in order, and its terminal service.");
    // Checked before anything else that uses the chain, so the first error a wrong stage
    // causes points at it; the later ones (where its wrong output goes on) come after.
    let check_name = format_ident!("__{}Check", name, span = name.span());
    let check_fields = st_uses.iter().chain([&terminal_future]);

    // The items that run the chain are spanned at the pipeline's name: what goes wrong
    // there because a stage's output is wrong is reported once, at that name (the items
    // users see — the structs, `new`, `stages` — keep the call site's span, so lints
    // treat them as generated).
    let fused = quote_spanned! {name.span()=>
        impl #fw::pipeline::FusedPipeline for #name {
            type Stages = #stages_name;
            type Future = #terminal_future;
            type Error = #terminal_error;
            type States = (#(#st_uses,)*);

            #[inline]
            // Spanned at the user's stages (for errors), so lints see this code as theirs:
            // a stage's state may well be `()`.
            #[allow(clippy::let_unit_value, clippy::unit_arg)]
            fn on_responses(
                __stages: &#stages_name,
                (#(#ss,)*): Self::States,
                __response: &mut #fw::request::ProxyResponse,
            ) {
                #(#unwind_all)*
            }
        }

        impl #name {
            /// Run one request: every stage's `on_request` in order, then the terminal
            /// service; `on_response` runs in reverse order on its result.
            #[inline]
            #[allow(unused_mut, clippy::let_unit_value, clippy::unit_arg)]
            #vis fn call_fused(&self, mut #x0: #in0) -> #future_name {
                let __stages: &#stages_name = &self.stages;
                #(#call_steps)*
                let __future = #terminal_call;
                #fw::pipeline::FusedFuture::forwarding(
                    __future,
                    ::std::sync::Arc::clone(&self.stages),
                    (#(#ss,)*),
                )
            }

        }

        impl #p::tower_service::Service<#in0> for #name {
            type Response = #fw::request::ProxyResponse;
            type Error = <#name as #fw::pipeline::FusedPipeline>::Error;
            type Future = #future_name;

            fn poll_ready(
                &mut self,
                _cx: &mut ::core::task::Context<'_>,
            ) -> ::core::task::Poll<::core::result::Result<(), Self::Error>> {
                ::core::task::Poll::Ready(::core::result::Result::Ok(()))
            }

            fn call(&mut self, request: #in0) -> #future_name {
                self.call_fused(request)
            }
        }

        impl #p::hyper::service::Service<#in0> for #name {
            type Response = #p::http::Response<#fw::body::ProxyBody>;
            type Error = <#name as #fw::pipeline::FusedPipeline>::Error;
            type Future = #fw::server::IntoResponse<#future_name>;

            fn call(&self, request: #in0) -> Self::Future {
                #fw::server::IntoResponse::new(self.call_fused(request))
            }
        }
    };

    quote! {
        #(#aliases)*

        #[doc(hidden)]
        #[allow(dead_code, non_camel_case_types)]
        struct #check_name(#(#check_fields,)*);

        #(#attrs)*
        #vis struct #name {
            stages: ::std::sync::Arc<#stages_name>,
        }

        #[doc = #doc_stages]
        #[allow(missing_debug_implementations)]
        #vis struct #stages_name {
            #(
                #[allow(missing_docs)]
                pub #names: #types,
            )*
            #[allow(missing_docs)]
            pub #tname: #tty,
        }

        #[doc = #doc_future]
        #vis type #future_name = #fw::pipeline::FusedFuture<#name>;

        impl ::core::clone::Clone for #name {
            fn clone(&self) -> Self {
                #name { stages: ::std::sync::Arc::clone(&self.stages) }
            }
        }

        impl ::core::fmt::Debug for #name {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                f.debug_struct(::core::stringify!(#name)).finish_non_exhaustive()
            }
        }

        impl #name {
            /// Assemble the pipeline from its stages and terminal service, in order.
            #[allow(clippy::too_many_arguments)]
            #vis fn new(#(#names: #types,)* #tname: #tty) -> Self {
                #name {
                    stages: ::std::sync::Arc::new(#stages_name { #(#names,)* #tname }),
                }
            }

            /// The stages and the terminal service.
            #vis fn stages(&self) -> &#stages_name {
                &self.stages
            }

            #extra_impl
        }

        #fused
    }
}

/// The span a type error about a stage points at: the last segment of its type's path
/// (`LoadBalancing` in `fuseway::balancing::LoadBalancing`, `Forwarder` in
/// `Forwarder<B>`), the type's first token otherwise. One token, because a span over
/// several tokens cannot be made on stable Rust.
fn own_span(ty: &Type) -> Span {
    match ty {
        Type::Path(path) => path
            .path
            .segments
            .last()
            .map_or_else(|| ty.span(), |segment| segment.ident.span()),
        _ => ty.span(),
    }
}

/// `tokens` with every token (and group) at `span`.
fn respan(tokens: TokenStream, span: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut tree| {
            if let TokenTree::Group(group) = &tree {
                let mut inner = Group::new(group.delimiter(), respan(group.stream(), span));
                inner.set_span(span);
                tree = TokenTree::Group(inner);
            } else {
                tree.set_span(span);
            }
            tree
        })
        .collect()
}
