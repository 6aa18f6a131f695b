//! Route values: the parameters of a route's path template, captured from a request
//! path that the route matched.

use super::template::{PathTemplate, Segment};

/// Captures the values of a path template's parameters (`{id}`, `{name?}`,
/// `{**rest}`) from request paths, for transforms such as `PathPattern`.
///
/// ```
/// use fuseway::routing::RouteValuesCapture;
///
/// let capture = RouteValuesCapture::new(Some("/api/{version}/{**rest}")).unwrap();
/// let values = capture.capture("/Api/v2/users/a%20b/");
/// assert_eq!(values.get("VERSION"), Some("v2"));
/// assert_eq!(values.get("rest"), Some("users/a%20b/"));
/// assert_eq!(values.get("other"), None);
/// ```
#[derive(Debug, Clone)]
pub struct RouteValuesCapture {
    segments: Vec<Part>,
}

#[derive(Debug, Clone)]
enum Part {
    Literal,
    Param(Box<str>),
    CatchAll(Box<str>),
}

/// The values captured from one request path: slices of that path, still
/// percent-encoded as the client sent them. Names compare ASCII case-insensitively.
#[derive(Debug, Clone, Default)]
pub struct RouteValues<'a> {
    values: Vec<(&'a str, &'a str)>,
}

impl<'a> RouteValues<'a> {
    /// The value of parameter `name`; `None` when the route has no such parameter or
    /// the request left it out (an optional parameter, an empty catch-all).
    pub fn get(&self, name: &str) -> Option<&'a str> {
        self.values
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|&(_, v)| v)
    }

    /// Every captured `(name, value)` pair, in template order.
    pub fn iter(&self) -> impl Iterator<Item = (&'a str, &'a str)> + '_ {
        self.values.iter().copied()
    }
}

impl RouteValuesCapture {
    /// The capture for a route's `Match.Path` (`None`: the route matches every path,
    /// as `/{**catchall}`). Errors say what is wrong with the template.
    pub fn new(template: Option<&str>) -> Result<Self, String> {
        let template = match template {
            Some(t) => PathTemplate::parse(t)?,
            None => PathTemplate::match_all(),
        };
        let segments = template
            .segments()
            .iter()
            .map(|s| match s {
                Segment::Literal(_) => Part::Literal,
                Segment::Param { name, .. } => Part::Param(name.clone()),
                Segment::CatchAll { name } => Part::CatchAll(name.clone()),
            })
            .collect();
        Ok(RouteValuesCapture { segments })
    }

    /// The route values in `path`, a normalised request path (no dot segments, no
    /// repeated slashes) that the route matched. A catch-all takes the rest of the
    /// path, slashes (and a trailing slash) included.
    pub fn capture<'a>(&'a self, path: &'a str) -> RouteValues<'a> {
        let mut values = Vec::new();
        let mut rest = path.trim_start_matches('/');
        for part in &self.segments {
            let (segment, after) = match rest.split_once('/') {
                Some((s, a)) => (s, a),
                None => (rest, ""),
            };
            match part {
                Part::Literal => {}
                Part::Param(name) => {
                    if !segment.is_empty() {
                        values.push((&**name, segment));
                    }
                }
                Part::CatchAll(name) => {
                    if !rest.is_empty() {
                        values.push((&**name, rest));
                    }
                    break;
                }
            }
            rest = after;
        }
        RouteValues { values }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captures_params_optionals_and_catch_all() {
        let c = RouteValuesCapture::new(Some("/a/{x}/{y?}/{**rest}")).unwrap();
        let v = c.capture("/A/one/two/three/four");
        assert_eq!(v.get("x"), Some("one"));
        assert_eq!(v.get("Y"), Some("two"));
        assert_eq!(v.get("rest"), Some("three/four"));
        let v = c.capture("/a/one");
        assert_eq!(v.get("x"), Some("one"));
        assert_eq!(v.get("y"), None);
        assert_eq!(v.get("rest"), None);
        let v = c.capture("/a/one/");
        assert_eq!((v.get("y"), v.get("rest")), (None, None));
    }

    #[test]
    fn no_path_is_a_catch_all() {
        let c = RouteValuesCapture::new(None).unwrap();
        assert_eq!(c.capture("/x/y/").get("catchall"), Some("x/y/"));
        assert_eq!(c.capture("/").get("catchall"), None);
        assert!(RouteValuesCapture::new(Some("/{oops")).is_err());
    }
}
