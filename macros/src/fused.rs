//! `fused_pipeline!`: parsing and expansion.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::parse::{Parse, ParseStream};
use syn::spanned::Spanned;
use syn::{braced, parenthesized, Attribute, Ident, Token, Type, Visibility};

/// One `name: Type` entry.
pub(crate) struct Entry {
    pub(crate) name: Ident,
    pub(crate) ty: Type,
}

impl Parse for Entry {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let name: Ident = input.parse()?;
        input.parse::<Token![:]>()?;
        let ty: Type = input.parse()?;
        Ok(Entry { name, ty })
    }
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
                body.parse::<Token![=>]>()?;
                terminal = Some(body.parse::<Entry>()?);
                if body.peek(Token![,]) {
                    body.parse::<Token![,]>()?;
                }
                if !body.is_empty() {
                    return Err(body.error("the terminal service (`=> name: Type`) must come last"));
                }
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
    let fw = quote!(::fuseway);
    let p = quote!(::fuseway::__private);
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
    let stages_name = format_ident!("{}Stages", name);
    let future_name = format_ident!("{}Future", name);
    let state_name = format_ident!("__{}State", name);
    let state_proj = format_ident!("__{}StateProj", name);

    // Type aliases: In{k} is what stage k takes; In{n} what the terminal takes.
    let in_alias: Vec<Ident> = (0..=n)
        .map(|k| format_ident!("__{}In{}", name, k))
        .collect();
    let st_alias: Vec<Ident> = (0..n).map(|k| format_ident!("__{}St{}", name, k)).collect();
    let mut aliases = Vec::new();
    let in0 = &in_alias[0];
    aliases.push(quote! {
        #[doc(hidden)]
        #[allow(non_camel_case_types)]
        #vis type #in0 = #request;
    });
    for (k, stage) in stages.iter().enumerate() {
        let ty = &stage.ty;
        let this_in = &in_alias[k];
        let next_in = &in_alias[k + 1];
        let st = &st_alias[k];
        aliases.push(quote_spanned! {ty.span()=>
            #[doc(hidden)]
            #[allow(non_camel_case_types)]
            #vis type #next_in = <#ty as #fw::stage::Stage<#this_in>>::Out;
            #[doc(hidden)]
            #[allow(non_camel_case_types)]
            #vis type #st = <#ty as #fw::stage::Stage<#this_in>>::State;
        });
    }

    // Compile-time checks pointing at the offending entry.
    let mut checks = Vec::new();
    for (k, stage) in stages.iter().enumerate() {
        let ty = &stage.ty;
        let this_in = &in_alias[k];
        checks.push(quote_spanned! {ty.span()=>
            const _: () = {
                let _ = #p::assert_stage::<#ty, #this_in>;
            };
        });
    }
    let tty = &terminal.ty;
    let last_in = &in_alias[n];
    checks.push(quote_spanned! {tty.span()=>
        const _: () = {
            let _ = #p::assert_terminal::<#tty, #last_in>;
        };
    });

    let names: Vec<&Ident> = stages.iter().map(|s| &s.name).collect();
    let types: Vec<&Type> = stages.iter().map(|s| &s.ty).collect();
    let tname = &terminal.name;

    // call: each stage's on_request in order; an early answer runs the earlier stages'
    // on_response in reverse and returns a ready future.
    let xs: Vec<Ident> = (0..=n).map(|k| format_ident!("__x{}", k)).collect();
    let ss: Vec<Ident> = (0..n).map(|k| format_ident!("__s{}", k)).collect();
    let mut call_steps = Vec::new();
    for k in 0..n {
        let stage = names[k];
        let this_in = &in_alias[k];
        let x_in = &xs[k];
        let x_out = &xs[k + 1];
        let s = &ss[k];
        let unwind: Vec<TokenStream> = (0..k)
            .rev()
            .map(|j| {
                let sj = &ss[j];
                let nj = names[j];
                let inj = &in_alias[j];
                quote! { #fw::stage::Stage::<#inj>::on_response(&__stages.#nj, #sj, &mut __response); }
            })
            .collect();
        call_steps.push(quote! {
            let (#x_out, #s) = match #fw::stage::Stage::<#this_in>::on_request(&__stages.#stage, #x_in) {
                ::core::result::Result::Ok(v) => v,
                ::core::result::Result::Err(mut __response) => {
                    #(#unwind)*
                    return #future_name::answered(__response);
                }
            };
        });
    }
    let x0 = &xs[0];
    let xn = &xs[n];
    let unwind_all: Vec<TokenStream> = (0..n)
        .rev()
        .map(|j| {
            let sj = &ss[j];
            let nj = names[j];
            let inj = &in_alias[j];
            quote! { #fw::stage::Stage::<#inj>::on_response(&__stages.#nj, #sj, &mut __response); }
        })
        .collect();

    let doc_future = format!(
        "The one future of [`{name}`]: the terminal service's future plus the state of every stage."
    );
    let doc_stages = format!("The stages of [`{name}`], in order, and its terminal service.");
    let doc_new = "Assemble the pipeline from its stages and terminal service, in order.";
    let span = Span::call_site();

    quote_spanned! {span=>
        #(#aliases)*
        #(#checks)*

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
            #[doc = #doc_new]
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

            /// Run one request: every stage's `on_request` in order, then the terminal
            /// service; `on_response` runs in reverse order on its result.
            #vis fn call_fused(&self, #x0: #in0) -> #future_name {
                let __stages: &#stages_name = &self.stages;
                #(#call_steps)*
                let __future = #p::hyper::service::Service::call(&__stages.#tname, #xn);
                #future_name {
                    state: #state_name::Forwarding {
                        future: __future,
                        stages: ::std::sync::Arc::clone(&self.stages),
                        states: ::core::option::Option::Some((#(#ss,)*)),
                    },
                }
            }

            #extra_impl
        }

        #p::pin_project! {
            #[doc = #doc_future]
            #[must_use = "futures do nothing unless polled"]
            #vis struct #future_name {
                #[pin]
                state: #state_name,
            }
        }

        #p::pin_project! {
            #[doc(hidden)]
            #[project = #state_proj]
            #vis enum #state_name {
                Forwarding {
                    #[pin]
                    future: <#tty as #p::hyper::service::Service<#last_in>>::Future,
                    stages: ::std::sync::Arc<#stages_name>,
                    states: ::core::option::Option<(#(#st_alias,)*)>,
                },
                Answered {
                    response: ::core::option::Option<#fw::request::ProxyResponse>,
                },
            }
        }

        impl ::core::fmt::Debug for #future_name {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                f.debug_struct(::core::stringify!(#future_name)).finish_non_exhaustive()
            }
        }

        impl #future_name {
            fn answered(response: #fw::request::ProxyResponse) -> Self {
                #future_name {
                    state: #state_name::Answered {
                        response: ::core::option::Option::Some(response),
                    },
                }
            }
        }

        impl ::core::future::Future for #future_name {
            type Output = ::core::result::Result<
                #fw::request::ProxyResponse,
                <#tty as #p::hyper::service::Service<#last_in>>::Error,
            >;

            fn poll(
                self: ::core::pin::Pin<&mut Self>,
                cx: &mut ::core::task::Context<'_>,
            ) -> ::core::task::Poll<Self::Output> {
                match self.project().state.project() {
                    #state_proj::Answered { response } => ::core::task::Poll::Ready(
                        ::core::result::Result::Ok(response.take().expect("polled after completion")),
                    ),
                    #state_proj::Forwarding { future, stages, states } => {
                        let mut __response = match ::core::future::Future::poll(future, cx) {
                            ::core::task::Poll::Pending => return ::core::task::Poll::Pending,
                            ::core::task::Poll::Ready(::core::result::Result::Ok(r)) => r,
                            ::core::task::Poll::Ready(::core::result::Result::Err(e)) => {
                                states.take();
                                return ::core::task::Poll::Ready(::core::result::Result::Err(e));
                            }
                        };
                        let (#(#ss,)*) = states.take().expect("polled after completion");
                        let __stages: &#stages_name = &**stages;
                        #(#unwind_all)*
                        ::core::task::Poll::Ready(::core::result::Result::Ok(__response))
                    }
                }
            }
        }

        impl #p::tower_service::Service<#in0> for #name {
            type Response = #fw::request::ProxyResponse;
            type Error = <#tty as #p::hyper::service::Service<#last_in>>::Error;
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
            type Error = <#tty as #p::hyper::service::Service<#last_in>>::Error;
            type Future = #fw::server::IntoResponse<#future_name>;

            fn call(&self, request: #in0) -> Self::Future {
                #fw::server::IntoResponse::new(self.call_fused(request))
            }
        }
    }
}
