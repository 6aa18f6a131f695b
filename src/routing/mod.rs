//! Routing: compiles route match criteria into a fast matcher and picks the route for a
//! request with YARP's semantics.

mod constraint;
mod header;
mod host;
mod inline;
mod method;
mod path;
mod query;
mod table;
mod template;
mod text;
mod values;

pub use table::RouteTable;
