//! `Match.Methods` as a bit set.

use http::Method;

/// The methods a route may name, in YARP's list (plus `CONNECT`); a method's bit is its
/// index here.
static METHODS: [Method; 9] = [
    Method::HEAD,
    Method::OPTIONS,
    Method::GET,
    Method::PUT,
    Method::POST,
    Method::PATCH,
    Method::DELETE,
    Method::TRACE,
    Method::CONNECT,
];

/// A set of methods; empty means every method.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub(super) struct MethodSet(u16);

/// Why a `Methods` entry was rejected.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum MethodError {
    /// Not one of the known methods.
    Unknown,
    /// Listed twice.
    Duplicate,
}

impl MethodSet {
    /// Add a method name from config (case-insensitive).
    pub(super) fn add(&mut self, name: &str) -> Result<(), MethodError> {
        let i = METHODS
            .iter()
            .position(|m| m.as_str().eq_ignore_ascii_case(name))
            .ok_or(MethodError::Unknown)?;
        let bit = 1 << i;
        if self.0 & bit != 0 {
            return Err(MethodError::Duplicate);
        }
        self.0 |= bit;
        Ok(())
    }

    /// Whether the set names any method (an empty set matches every method).
    pub(super) fn is_restricted(self) -> bool {
        self.0 != 0
    }

    /// Whether a request method (as `bit`) is accepted.
    pub(super) fn accepts(self, bit: u16) -> bool {
        self.0 == 0 || self.0 & bit != 0
    }

    /// The bit of a request method; `0` for methods outside the list, which then only
    /// match routes without `Methods`. Request methods are case-sensitive (RFC 9110).
    pub(super) fn bit(method: &Method) -> u16 {
        // `Method`'s own equality: a tag comparison for these, no string comparison.
        METHODS
            .iter()
            .position(|m| m == method)
            .map_or(0, |i| 1 << i)
    }

    /// The known method names, for error messages.
    pub(super) fn known() -> String {
        let names: Vec<&str> = METHODS.iter().map(Method::as_str).collect();
        names.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_case_insensitively_and_rejects_duplicates() {
        let mut set = MethodSet::default();
        assert!(!set.is_restricted());
        assert!(set.accepts(MethodSet::bit(&Method::DELETE)));
        set.add("get").unwrap();
        set.add("Post").unwrap();
        assert_eq!(set.add("GET"), Err(MethodError::Duplicate));
        assert_eq!(set.add("FETCH"), Err(MethodError::Unknown));
        assert!(set.is_restricted());
        assert!(set.accepts(MethodSet::bit(&Method::GET)));
        assert!(set.accepts(MethodSet::bit(&Method::POST)));
        assert!(!set.accepts(MethodSet::bit(&Method::HEAD)));
    }

    #[test]
    fn extension_methods_only_match_unrestricted_sets() {
        let custom = Method::from_bytes(b"PURGE").unwrap();
        assert_eq!(MethodSet::bit(&custom), 0);
        let lower = Method::from_bytes(b"get").unwrap();
        assert_eq!(MethodSet::bit(&lower), 0);
        let mut set = MethodSet::default();
        assert!(set.accepts(0));
        set.add("CONNECT").unwrap();
        assert!(!set.accepts(0));
        assert!(set.accepts(MethodSet::bit(&Method::CONNECT)));
    }
}
