//! The routes the routing and reload benches build their tables from.

/// The `Match` of route `i`, by `i % 5`: a parameter route `/svc{i}/users/{id}`, a
/// literal route `/svc{i}/items/list`, a catch-all route `/svc{i}/static/{**rest}`, a
/// host route (`h{i}.example.com`, `/api/{id}`), or a header route (`/svc{i}/h` with
/// `x-tenant: t{i}`).
pub fn match_of(i: usize) -> String {
    match i % 5 {
        0 => format!(r#""Path": "/svc{i}/users/{{id}}""#),
        1 => format!(r#""Path": "/svc{i}/items/list""#),
        2 => format!(r#""Path": "/svc{i}/static/{{**rest}}""#),
        3 => format!(r#""Path": "/api/{{id}}", "Hosts": ["h{i}.example.com"]"#),
        _ => format!(
            r#""Path": "/svc{i}/h", "Headers": [{{ "Name": "x-tenant", "Values": ["t{i}"], "Mode": "ExactHeader" }}]"#
        ),
    }
}

/// Route `i` (`r00042`) to `cluster`, as a JSON member of `Routes`.
pub fn route(i: usize, cluster: &str) -> String {
    format!(
        r#""r{i:05}": {{ "ClusterId": "{cluster}", "Match": {{ {} }} }}"#,
        match_of(i)
    )
}
