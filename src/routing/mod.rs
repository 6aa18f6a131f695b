//! Routing: compiles route match criteria into a fast matcher and picks the route for a
//! request with YARP's semantics (ASP.NET Core endpoint routing).
//!
//! [`RouteTable::build`] validates and compiles the routes of a configuration;
//! [`RouteTable::find`] returns the index of the route that serves a request.
//!
//! # Path templates
//!
//! A template starts with `/`; each segment is one of
//! - a literal, matched ASCII case-insensitively (`{{` / `}}` write literal braces);
//! - `{name}`: exactly one non-empty segment;
//! - `{name:c}` with `c` one of `int`, `long`, `bool`, `alpha`, `guid` (chainable:
//!   `{id:int:long}`); other constraints are rejected;
//! - `{name?}`: an optional segment, only followed by optional segments or a catch-all;
//! - `{*name}` / `{**name}`: a catch-all over the rest of the path (zero or more
//!   segments), last segment only.
//!
//! A segment mixing text and parameters (`file-{id}.txt`) and default values (`{id=1}`)
//! are validation errors. A trailing `/` in a template is ignored. A route without
//! `Path` matches every path (`/{**catchall}`).
//!
//! # Request path normalisation
//!
//! The route is chosen on a normalised path, not on the raw one:
//! 1. the path is split on `/`, and each segment is percent-decoded on its own — so
//!    `%2F` decodes to a `/` that stays inside its segment and never splits it;
//! 2. empty segments are dropped: repeated slashes collapse (`//api` is `/api`) and a
//!    trailing slash is tolerated (`/api/` is `/api`);
//! 3. dot segments are removed after decoding: `.` is dropped and `..` removes the
//!    segment before it (never going above the root). `/api/../admin` and
//!    `/api/%2e%2e/admin` therefore route as `/admin`. Empty segments are dropped
//!    first, so `/a//../b` is `/b`;
//! 4. ASCII letters are folded to lower case (non-ASCII text compares exactly).
//!
//! Malformed escapes (`%zz`) are kept as they are. The query string plays no part.
//!
//! # Hosts
//!
//! `example.com` matches that host exactly (case-insensitive); `*.example.com` any
//! subdomain at any depth but not `example.com`; `host:8080` and `*:8080` also require
//! the port (`host:*` is any port; a bare `*` is rejected: leave `Hosts` out instead).
//! IPv6 literals are written in brackets. Internationalised names must be given in
//! punycode. The request host is the URI authority (HTTP/2, absolute-form) or else
//! the `Host` header; a trailing dot is ignored and a missing port is 443 for an
//! `https` URI, else 80. A request with no (or a malformed) host only matches routes
//! without `Hosts`.
//!
//! # Methods
//!
//! `Methods` lists any of HEAD OPTIONS GET PUT POST PATCH DELETE TRACE CONNECT
//! (case-insensitive in config; unknown or repeated names are errors). The request
//! method compares case-sensitively; `HEAD` does not match a `GET`-only route, and
//! other methods (`PURGE`) only match routes without `Methods`.
//!
//! # Headers
//!
//! All rules must match; a rule matches when any of its `Values` does. Values compare
//! ASCII case-insensitively unless `IsCaseSensitive`.
//! - `ExactHeader` / `HeaderPrefix` / `Contains`: some element equals / starts with /
//!   contains a value. Each header line is split into elements on `,` (on `;` for
//!   `Cookie`), never inside a quoted string; elements are trimmed, and a fully quoted
//!   element is compared without its quotes (as YARP). Every line of a repeated
//!   header counts.
//! - `NotContains`: no element contains any value; matches an absent or empty header.
//! - `Exists`: some line is non-empty. `NotExists`: the header is absent (a present but
//!   empty header matches neither `Exists` nor `NotExists`, as in YARP).
//!
//! `Values` are required (and must not be empty strings) for the comparing modes and
//! not allowed for `Exists` / `NotExists`.
//!
//! # Query parameters
//!
//! The query is split on `&` and each pair at its first `=`; names and values are
//! percent-decoded with `+` as a space, and names compare case-insensitively. For
//! `Exact` / `Prefix` / `Contains` any occurrence of a repeated parameter may match;
//! `NotContains` needs every occurrence to contain none of the values (an absent
//! parameter matches); `Exists` needs an occurrence with a non-empty value. `Values`
//! follow the same rules as for headers.
//!
//! Empty lists (`"Methods": []`, `"Hosts": []`, ...) are the same as absent ones.
//!
//! # Precedence
//!
//! Among the routes that match a request the winner is decided by, in turn:
//! 1. lower `Order` (default 0);
//! 2. path precedence, compared segment by segment, from most to least specific:
//!    literal, constrained parameter, parameter, constrained optional, optional,
//!    catch-all; a template that is a prefix of another wins (`/api` over
//!    `/api/{*rest}` for `/api`);
//! 3. a route with `Methods` over one without;
//! 4. host specificity of the matching pattern: host+port > host > wildcard+port >
//!    wildcard > port only > no hosts; between two matching wildcards the longer
//!    suffix wins;
//! 5. more header rules; 6. more query rules;
//! 7. otherwise (partly overlapping routes, e.g. `Methods: [GET]` and
//!    `Methods: [GET, POST]`) the route listed first wins.
//!
//! Two routes that would tie for *every* request (same `Order` and the same criteria up
//! to parameter names, list order and case) are a validation error on the later one.
//!
//! # Cost
//!
//! Routes are dispatched by exact host (hash map), by wildcard suffix (one hash lookup
//! per dot in the request host) and a table for the rest; each is a segment trie whose
//! nodes keep their candidates sorted by precedence, explored branch-and-bound. `find`
//! does not allocate for ordinary requests (the path is split on the stack) and does
//! not scan routes linearly, except the routes that share one trie node (same path and
//! host), which are tried in precedence order against method, header and query rules.

mod capture;
mod constraint;
mod header;
mod host;
mod method;
mod path;
mod query;
mod route;
mod table;
mod template;
mod text;
mod trie;
mod values;

#[cfg(test)]
mod tests;

pub use capture::{RouteValues, RouteValuesCapture};
pub(crate) use host::AllowedHosts;
pub use table::RouteTable;
mod stage;
pub use stage::Routing;
