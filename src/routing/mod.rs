//! Routing: compiles route match criteria into a fast matcher and picks the route for a
//! request with YARP's semantics.

mod table;

pub use table::RouteTable;
mod stage;
pub use stage::Routing;
