use std::collections::BTreeMap;

use super::parse::*;
use super::*;

fn entry(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn one(pairs: &[(&str, &str)]) -> Result<Transform, Vec<String>> {
    parse_transforms(&[entry(pairs)], "T")
        .map(|mut v| v.remove(0))
        .map_err(|e| e.iter().map(|e| format!("{e}")).collect())
}

fn err(pairs: &[(&str, &str)]) -> String {
    one(pairs).unwrap_err().join("\n")
}

#[test]
fn path_transforms() {
    assert_eq!(
        one(&[("PathPrefix", "/api")]),
        Ok(Transform::PathPrefix("/api".into()))
    );
    assert_eq!(
        one(&[("pathremoveprefix", "/v1")]),
        Ok(Transform::PathRemovePrefix("/v1".into()))
    );
    assert_eq!(one(&[("PathSet", "")]), Ok(Transform::PathSet("".into())));
    assert_eq!(
        one(&[("PathPattern", "/my/{plugin}/{**rest}")]),
        Ok(Transform::PathPattern("/my/{plugin}/{**rest}".into()))
    );
    assert!(err(&[("PathPrefix", "api")]).contains("must start with `/`"));
    assert!(err(&[("PathPattern", "/a/{b")]).contains("unbalanced"));
    assert!(err(&[("PathPattern", "")]).contains("empty"));
}

#[test]
fn query_and_method_transforms() {
    assert_eq!(
        one(&[("QueryValueParameter", "foo"), ("Append", "bar")]),
        Ok(Transform::QueryValueParameter {
            name: "foo".into(),
            action: ValueAction::Append,
            value: "bar".into()
        })
    );
    assert_eq!(
        one(&[("QueryRouteParameter", "foo"), ("set", "id")]),
        Ok(Transform::QueryRouteParameter {
            name: "foo".into(),
            action: ValueAction::Set,
            route_value: "id".into()
        })
    );
    assert_eq!(
        one(&[("QueryRemoveParameter", "foo")]),
        Ok(Transform::QueryRemoveParameter("foo".into()))
    );
    assert!(err(&[("QueryValueParameter", "foo")]).contains("needs `Set` or `Append`"));
    assert!(err(&[
        ("QueryValueParameter", "foo"),
        ("Set", "a"),
        ("Append", "b")
    ])
    .contains("not both"));
    assert_eq!(
        one(&[("HttpMethodChange", "put"), ("Set", "POST")]),
        Ok(Transform::HttpMethodChange {
            from: Method::PUT,
            to: Method::POST
        })
    );
    assert!(err(&[("HttpMethodChange", "PUT")]).contains("missing `Set`"));
    assert!(err(&[("HttpMethodChange", "P T"), ("Set", "GET")]).contains("HTTP method"));
}

#[test]
fn request_header_transforms() {
    assert_eq!(
        one(&[("RequestHeadersCopy", "False")]),
        Ok(Transform::RequestHeadersCopy(false))
    );
    assert_eq!(
        one(&[("RequestHeaderOriginalHost", "true")]),
        Ok(Transform::RequestHeaderOriginalHost(true))
    );
    assert!(err(&[("RequestHeadersCopy", "yes")]).contains("`true` or `false`"));
    assert_eq!(
        one(&[("RequestHeader", "X-Foo"), ("Set", "bar")]),
        Ok(Transform::RequestHeader {
            name: HeaderName::from_static("x-foo"),
            action: ValueAction::Set,
            value: HeaderValue::from_static("bar")
        })
    );
    assert!(err(&[("RequestHeader", "X Foo"), ("Set", "bar")]).contains("header name"));
    assert!(err(&[("RequestHeader", "X-Foo"), ("Set", "a\nb")]).contains("header value"));
    assert_eq!(
        one(&[("RequestHeaderRemove", "Cookie")]),
        Ok(Transform::RequestHeaderRemove(http::header::COOKIE))
    );
    assert_eq!(
        one(&[("RequestHeadersAllowed", "Accept; Content-Type;")]),
        Ok(Transform::RequestHeadersAllowed(vec![
            http::header::ACCEPT,
            http::header::CONTENT_TYPE
        ]))
    );
    assert!(err(&[("RequestHeadersAllowed", "Accept;Bad Name")]).contains("`Bad Name`"));
    assert_eq!(
        one(&[("ClientCert", "X-Client-Cert")]),
        Ok(Transform::ClientCert(HeaderName::from_static(
            "x-client-cert"
        )))
    );
}

#[test]
fn x_forwarded() {
    let Ok(Transform::XForwarded(t)) = one(&[
        ("X-Forwarded", "Append"),
        ("Prefix", "Off"),
        ("HeaderPrefix", "X-Original-"),
    ]) else {
        panic!("X-Forwarded should parse")
    };
    assert_eq!(t.for_action, ForwardedAction::Append);
    assert_eq!(t.host_action, ForwardedAction::Append);
    assert_eq!(t.prefix_action, ForwardedAction::Off);
    assert_eq!(t.header_prefix, "X-Original-");
    assert!(err(&[("X-Forwarded", "Sometimes")]).contains("expected one of Set, Append"));
    assert!(err(&[("X-Forwarded", "Set"), ("For", "Maybe")]).contains("For: unknown"));
    assert!(err(&[("X-Forwarded", "Set"), ("HeaderPrefix", "X Y")]).contains("HeaderPrefix"));
}

#[test]
fn forwarded() {
    let Ok(Transform::Forwarded(t)) = one(&[
        ("Forwarded", "for, Proto"),
        ("ForFormat", "IpAndPort"),
        ("Action", "Append"),
    ]) else {
        panic!("Forwarded should parse")
    };
    assert!(t.include_for && t.include_proto && !t.include_by && !t.include_host);
    assert_eq!(t.for_format, NodeFormat::IpAndPort);
    assert_eq!(t.by_format, NodeFormat::Random);
    assert_eq!(t.action, ForwardedAction::Append);
    assert!(err(&[("Forwarded", "for,path")]).contains("`path`"));
    assert!(err(&[("Forwarded", "for"), ("ByFormat", "Mac")]).contains("ByFormat"));
}

#[test]
fn response_transforms() {
    assert_eq!(
        one(&[
            ("ResponseHeader", "X-Served"),
            ("Append", "f"),
            ("When", "always")
        ]),
        Ok(Transform::ResponseHeader {
            name: HeaderName::from_static("x-served"),
            action: ValueAction::Append,
            value: HeaderValue::from_static("f"),
            when: ResponseCondition::Always
        })
    );
    assert_eq!(
        one(&[("ResponseHeaderRemove", "Server")]),
        Ok(Transform::ResponseHeaderRemove {
            name: http::header::SERVER,
            when: ResponseCondition::Success
        })
    );
    assert!(
        err(&[("ResponseHeader", "X"), ("Set", "v"), ("When", "Never")]).contains("When: unknown")
    );
    assert!(matches!(
        one(&[("ResponseTrailer", "grpc-status"), ("Set", "0")]),
        Ok(Transform::ResponseTrailer { .. })
    ));
    assert!(matches!(
        one(&[
            ("ResponseTrailerRemove", "grpc-message"),
            ("When", "Failure")
        ]),
        Ok(Transform::ResponseTrailerRemove {
            when: ResponseCondition::Failure,
            ..
        })
    ));
    assert_eq!(
        one(&[("ResponseHeadersCopy", "true")]),
        Ok(Transform::ResponseHeadersCopy(true))
    );
    assert_eq!(
        one(&[("ResponseTrailersCopy", "false")]),
        Ok(Transform::ResponseTrailersCopy(false))
    );
    assert_eq!(
        one(&[("ResponseHeadersAllowed", "")]),
        Ok(Transform::ResponseHeadersAllowed(vec![]))
    );
    assert!(matches!(
        one(&[("ResponseTrailersAllowed", "grpc-status")]),
        Ok(Transform::ResponseTrailersAllowed(v)) if v.len() == 1
    ));
}

#[test]
fn shape_errors() {
    assert!(err(&[]).contains("empty transform"));
    let unknown = err(&[("PathPrefixx", "/a")]);
    assert!(
        unknown.contains("unknown transform `PathPrefixx`"),
        "{unknown}"
    );
    assert!(unknown.contains("PathRemovePrefix"), "{unknown}");
    assert!(err(&[("PathPrefix", "/a"), ("PathSet", "/b")]).contains("conflicting"));
    assert!(err(&[("PathPrefix", "/a"), ("pathprefix", "/b")]).contains("duplicate key"));
    assert!(err(&[("PathPrefix", "/a"), ("Set", "x")])
        .contains("unexpected key `Set`: a `PathPrefix` transform takes no other key"));
    let both = one(&[("RequestHeader", "X-A"), ("Sett", "v")]).unwrap_err();
    assert_eq!(both.len(), 2, "{both:?}");
    assert!(both.iter().any(|e| e.contains("unexpected key `Sett`")));
}

#[test]
fn errors_name_the_entry_and_every_bad_entry_is_reported() {
    let list = vec![
        entry(&[("PathPrefix", "/ok")]),
        entry(&[("Nope", "x")]),
        entry(&[("ResponseHeadersCopy", "maybe")]),
    ];
    let errors = parse_transforms(&list, "Routes.r1.Transforms").unwrap_err();
    let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        ["Routes.r1.Transforms[1]", "Routes.r1.Transforms[2]"]
    );
}
