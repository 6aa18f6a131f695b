//! Configuration: the serde model (YARP's shape), loading from JSON or TOML, and
//! validation that names the path of every bad field.

mod binder;
mod duration;
mod error;
mod limits;
mod load;
mod logging;
pub mod model;
mod names;
mod transforms;
mod validate;

pub use duration::ConfigDuration;
pub use error::{ConfigError, ConfigErrors};
pub use limits::{DataRate, Http2Limits, Ignored, ServerLimits};
pub use load::{
    env_overrides, environment_file, load_file, load_file_with_overrides, parse, parse_layered,
    parse_value, parse_with_overrides, Format,
};
pub use logging::{ConsoleLogging, LogLevel, LoggingConfig};
pub use model::*;
pub use names::{
    ActiveHealthPolicyName, AffinityFailurePolicyName, AvailableDestinationsPolicyName,
    ClientCertificateMode, CookieSameSite, CookieSecurePolicy, HttpVersion, HttpVersionPolicy,
    ListenProtocols, LoadBalancingPolicyName, PassiveHealthPolicyName, SessionAffinityPolicyName,
    TlsVersions,
};
pub use transforms::{
    parse_transforms, ForwardedAction, ForwardedTransform, NodeFormat, ResponseCondition,
    Transform, ValueAction, XForwardedTransform, TRANSFORM_KINDS,
};
pub use validate::MAX_WEIGHT;
