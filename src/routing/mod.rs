//! Routing: compiles route match criteria into a fast matcher and picks the route for a
//! request with YARP's semantics.

mod constraint;
mod inline;
mod path;
mod table;
mod template;
mod text;

pub use table::RouteTable;
