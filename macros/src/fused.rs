//! `fused_pipeline!`: parsing and expansion.

use proc_macro2::{Span, TokenStream, TokenTree};
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

    // The machinery is generic: `Name<Stages = NameStages>`, `NameStages<S0 = A, S1 = B,
    // T = F>`, and every impl that runs the chain is `impl<S0, S1, T, I1, I2> ... where
    // S0: Stage<Req, Out = I1>, S1: Stage<I1, Out = I2>, T: Terminal<I2>`. A generic impl
    // is checked once, under its bounds, and never fails for the user's types; the user's
    // types meet the chain in one place only, `__check` below, a function body that
    // follows it with `__private::Chain<In>` (each step's input known before its stage is
    // asked to take it): a stage that cannot take its input is one error there, at that
    // stage, and its unknown output does not become an error at every later use (as it
    // does where the chain is spelled out in types).
    let taken = idents(
        std::iter::once(request.to_token_stream())
            .chain(stages.iter().map(|s| s.ty.to_token_stream()))
            .chain([terminal.ty.to_token_stream()]),
    );
    let param = |base: String| {
        let plain = format_ident!("{}", base);
        if taken.contains(&base) {
            format_ident!("__{}", base)
        } else {
            plain
        }
    };
    let sp: Vec<Ident> = (0..n).map(|k| param(format!("S{k}"))).collect();
    let tp = param("T".to_owned());
    let stp = param("Stages".to_owned());
    // ip[k]: what stage k takes (ip[n]: the terminal), a parameter `I{k}` after each stage
    // that changes the request's type (an in-place stage's output is its input).
    let mut ip: Vec<TokenStream> = vec![request.to_token_stream()];
    let mut is: Vec<Ident> = Vec::new();
    for (k, stage) in stages.iter().enumerate() {
        let next = if stage.call == Call::InPlace {
            ip[k].clone()
        } else {
            let i = param(format!("I{}", k + 1));
            is.push(i.clone());
            i.into_token_stream()
        };
        ip.push(next);
    }
    let impl_params = quote!(#(#sp,)* #tp, #(#is,)*);
    let self_ty = quote!(#name<#stages_name<#(#sp,)* #tp>>);
    let bounds: Vec<TokenStream> = stages
        .iter()
        .enumerate()
        .map(|(k, stage)| {
            let (s, this_in, next_in) = (&sp[k], &ip[k], &ip[k + 1]);
            match stage.call {
                Call::ByValue => quote!(#s: #fw::stage::Stage<#this_in, Out = #next_in> + 'static),
                Call::InPlace => quote!(#s: #fw::stage::InPlace<#this_in> + 'static),
                Call::ByRef => quote!(
                    #s: #fw::stage::ByRef<#this_in> + #fw::stage::Stage<#this_in, Out = #next_in> + 'static
                ),
            }
        })
        .collect();
    let last_in = &ip[n];
    let where_clause = quote! {
        where
            #(#bounds,)*
            #tp: #fw::pipeline::Terminal<#last_in> + 'static,
    };

    let names: Vec<&Ident> = stages.iter().map(|s| &s.name).collect();
    let types: Vec<&Type> = stages.iter().map(|s| &s.ty).collect();
    let (tname, tty) = (&terminal.name, &terminal.ty);
    let ss: Vec<Ident> = (0..n).map(|k| format_ident!("__s{}", k)).collect();
    let xs: Vec<Ident> = (0..=n).map(|k| format_ident!("__x{}", k)).collect();

    // on_response of stage j.
    let on_response = |j: usize| {
        let (s, sj, nj, inj) = (&sp[j], &ss[j], names[j], &ip[j]);
        quote! {
            <#s as #fw::stage::Stage<#inj>>::on_response(&__stages.#nj, #sj, __response);
        }
    };

    // call: each stage's on_request in order; an early answer runs the earlier stages'
    // on_response (last first) and returns a ready future.
    let mut call_steps = Vec::new();
    // __check: the same chain over the user's types.
    let mut check_steps = Vec::new();
    // The variable holding the request as it goes from stage to stage.
    let mut x_in = &xs[0];
    for k in 0..n {
        let (stage, s, st, this_in) = (names[k], &sp[k], &ss[k], &ip[k]);
        let x_out = &xs[k + 1];
        let unwind: Vec<TokenStream> = (0..k).rev().map(on_response).collect();
        let answered = quote! {
            ::core::result::Result::Err(mut __answer) => {
                // Forwarding is the path laid out straight; an early answer is not.
                ::std::hint::cold_path();
                let __response = &mut __answer;
                #(#unwind)*
                return #fw::pipeline::FusedFuture::answered(__answer);
            }
        };
        let span = own_span(&stages[k].ty);
        // The field named at the type's span: the error's one span.
        let field = format_ident!("{}", stage, span = span);
        match stages[k].call {
            Call::InPlace => {
                call_steps.push(quote! {
                    let #st = match <#s as #fw::stage::InPlace<#this_in>>::on_request_in_place(&__stages.#stage, &mut #x_in) {
                        ::core::result::Result::Ok(v) => v,
                        #answered
                    };
                });
                check_steps.push(quote_spanned! {span=>
                    let __chain = __chain.in_place(&__stages.#field);
                });
            }
            Call::ByRef => {
                call_steps.push(quote! {
                    #[allow(unused_mut)]
                    let (mut #x_out, #st) = match <#s as #fw::stage::ByRef<#this_in>>::on_request_by_ref(&__stages.#stage, &#x_in) {
                        ::core::result::Result::Ok((__extra, __state)) => (<#s as #fw::stage::ByRef<#this_in>>::into_out(#x_in, __extra), __state),
                        #answered
                    };
                });
                check_steps.push(quote_spanned! {span=>
                    let __chain = __chain.by_ref(&__stages.#field);
                });
                x_in = x_out;
            }
            Call::ByValue => {
                call_steps.push(quote! {
                    #[allow(unused_mut)]
                    let (mut #x_out, #st) = match <#s as #fw::stage::Stage<#this_in>>::on_request(&__stages.#stage, #x_in) {
                        ::core::result::Result::Ok(v) => v,
                        #answered
                    };
                });
                check_steps.push(quote_spanned! {span=>
                    let __chain = __chain.stage(&__stages.#field);
                });
                x_in = x_out;
            }
        }
    }
    let unwind_all: Vec<TokenStream> = (0..n).rev().map(on_response).collect();
    let terminal_call =
        quote!(<#tp as #fw::pipeline::Terminal<#last_in>>::call_terminal(&__stages.#tname, #x_in));
    let tspan = own_span(tty);
    let tfield = format_ident!("{}", tname, span = tspan);
    let terminal_check = quote_spanned! {tspan=>
        __chain.terminal(&__stages.#tfield);
    };
    let x0 = &xs[0];

    let doc_future = format!(
        "The one future of [`{name}`]: the terminal service's future plus the state of every stage."
    );
    let doc_stages = format!(
        "The stages of [`{name}`], in order, and its terminal service (the parameters' \
         defaults are the pipeline's types)."
    );

    quote! {
        #(#attrs)*
        #vis struct #name<#stp = #stages_name> {
            stages: ::std::sync::Arc<#stp>,
        }

        #[doc = #doc_stages]
        #[allow(missing_debug_implementations)]
        #vis struct #stages_name<#(#sp = #types,)* #tp = #tty> {
            #(
                #[allow(missing_docs)]
                pub #names: #sp,
            )*
            #[allow(missing_docs)]
            pub #tname: #tp,
        }

        #[doc = #doc_future]
        #vis type #future_name = #fw::pipeline::FusedFuture<#name>;

        // The one place the user's types meet the chain (see `fused::expand`).
        const _: () = {
            #[allow(dead_code)]
            fn __check(__stages: &#stages_name) {
                let __chain = #p::Chain::<#request>::start();
                #(#check_steps)*
                #terminal_check
            }
        };

        impl<#stp> ::core::clone::Clone for #name<#stp> {
            fn clone(&self) -> Self {
                #name { stages: ::std::sync::Arc::clone(&self.stages) }
            }
        }

        impl<#stp> ::core::fmt::Debug for #name<#stp> {
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

        impl<#impl_params> #fw::pipeline::FusedPipeline for #self_ty #where_clause {
            type Stages = #stages_name<#(#sp,)* #tp>;
            type Future = <#tp as #fw::pipeline::Terminal<#last_in>>::Future;
            type Error = <#tp as #fw::pipeline::Terminal<#last_in>>::Error;
            type States = (#(<#sp as #fw::stage::Stage<#ip>>::State,)*);

            #[inline]
            // A stage's state may well be `()`.
            #[allow(clippy::let_unit_value, clippy::unit_arg)]
            fn on_responses(
                __stages: &Self::Stages,
                (#(#ss,)*): Self::States,
                __response: &mut #fw::request::ProxyResponse,
            ) {
                #(#unwind_all)*
            }
        }

        impl<#impl_params> #self_ty #where_clause {
            /// Run one request: every stage's `on_request` in order, then the terminal
            /// service; `on_response` runs in reverse order on its result.
            #[inline]
            #[allow(unused_mut, clippy::let_unit_value, clippy::unit_arg)]
            #vis fn call_fused(&self, mut #x0: #request) -> #fw::pipeline::FusedFuture<Self> {
                let __stages: &#stages_name<#(#sp,)* #tp> = &self.stages;
                #(#call_steps)*
                let __future = #terminal_call;
                #fw::pipeline::FusedFuture::forwarding(
                    __future,
                    ::std::sync::Arc::clone(&self.stages),
                    (#(#ss,)*),
                )
            }
        }

        impl<#impl_params> #p::tower_service::Service<#request> for #self_ty #where_clause {
            type Response = #fw::request::ProxyResponse;
            type Error = <Self as #fw::pipeline::FusedPipeline>::Error;
            type Future = #fw::pipeline::FusedFuture<Self>;

            fn poll_ready(
                &mut self,
                _cx: &mut ::core::task::Context<'_>,
            ) -> ::core::task::Poll<::core::result::Result<(), Self::Error>> {
                ::core::task::Poll::Ready(::core::result::Result::Ok(()))
            }

            fn call(&mut self, request: #request) -> Self::Future {
                self.call_fused(request)
            }
        }

        impl<#impl_params> #p::hyper::service::Service<#request> for #self_ty #where_clause {
            type Response = #p::http::Response<#fw::body::ProxyBody>;
            type Error = <Self as #fw::pipeline::FusedPipeline>::Error;
            type Future = #fw::pipeline::FusedResponse<Self>;

            fn call(&self, request: #request) -> Self::Future {
                #fw::pipeline::FusedResponse::new(self.call_fused(request))
            }
        }
    }
}

/// Every identifier in `streams` (to keep the generated generic parameters' names clear
/// of the user's).
fn idents(streams: impl IntoIterator<Item = TokenStream>) -> Vec<String> {
    fn walk(tokens: TokenStream, out: &mut Vec<String>) {
        for tree in tokens {
            match tree {
                TokenTree::Ident(ident) => out.push(ident.to_string()),
                TokenTree::Group(group) => walk(group.stream(), out),
                _ => {}
            }
        }
    }
    let mut out = Vec::new();
    for tokens in streams {
        walk(tokens, &mut out);
    }
    out
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
