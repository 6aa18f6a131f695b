//! The path sent to the destination: the request's path with dot segments and
//! repeated slashes removed — the same normalisation routing decided on — so a
//! destination never sees a path that would resolve outside the route that matched.
//! Other percent-encodings are passed through untouched.

/// The normalised form of `path`, or `None` when it is already normal (the common
/// case, which does not allocate).
pub(crate) fn normalize(path: &str) -> Option<String> {
    if !needs_normalizing(path) {
        return None;
    }
    let mut out: Vec<&str> = Vec::new();
    for segment in path.split('/') {
        match dots(segment) {
            _ if segment.is_empty() => {}
            Some(1) => {}
            Some(2) => {
                out.pop();
            }
            _ => out.push(segment),
        }
    }
    let mut s = String::with_capacity(path.len());
    for seg in &out {
        s.push('/');
        s.push_str(seg);
    }
    let trailing = path.ends_with('/') || path.rsplit('/').next().and_then(dots).is_some();
    if s.is_empty() || (trailing && !out.is_empty()) {
        s.push('/');
    }
    Some(s)
}

fn needs_normalizing(path: &str) -> bool {
    // One pass first: a path without `.`, `%` or a doubled `/` is normal (almost
    // every path).
    let mut previous = 0;
    let suspect = path.bytes().any(|b| {
        let doubled = b == b'/' && previous == b'/';
        previous = b;
        b == b'.' || b == b'%' || doubled
    });
    suspect && (path.contains("//") || path.split('/').any(|seg| dots(seg).is_some()))
}

/// `Some(1)` for `.`, `Some(2)` for `..` (also percent-encoded), else `None`.
fn dots(segment: &str) -> Option<usize> {
    let mut rest = segment.as_bytes();
    let mut n = 0;
    while !rest.is_empty() {
        if rest[0] == b'.' {
            rest = &rest[1..];
        } else if rest.len() >= 3 && rest[0] == b'%' && rest[1] == b'2' && (rest[2] | 0x20) == b'e'
        {
            rest = &rest[3..];
        } else {
            return None;
        }
        n += 1;
    }
    (n == 1 || n == 2).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::normalize;

    #[test]
    fn normal_paths_are_untouched() {
        for p in ["/", "/a", "/a/b/", "/a%2Fb", "/a.b/c..d", "/.well-known/x"] {
            assert_eq!(normalize(p), None, "{p}");
        }
    }

    #[test]
    fn dot_segments_and_slashes() {
        let cases = [
            ("/api/../admin/x", "/admin/x"),
            ("/api/%2e%2e/admin", "/admin"),
            ("/api/%2E./admin", "/admin"),
            ("/a/./b", "/a/b"),
            ("//a//b", "/a/b"),
            ("/../../x", "/x"),
            ("/a/..", "/"),
            ("/a/b/..", "/a/"),
            ("/a/%2e", "/a/"),
        ];
        for (input, want) in cases {
            assert_eq!(normalize(input).as_deref(), Some(want), "{input}");
        }
    }
}
