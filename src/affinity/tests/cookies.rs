//! The affinity key's cookie: YARP's test vectors and the cookie's attributes.

use super::*;

// ---- Test vectors ----

#[test]
fn hash_cookie_vectors() {
    // From YARP's own tests (HashCookieSessionAffinityPolicyTests: "dest-B").
    assert_eq!(hash_cookie_value("dest-B"), "53c079ed4c377b0d");
    // Computed independently with Python's `xxhash` 4.1.0:
    // xxhash.xxh64(s.encode('utf-16-le'), seed=0).hexdigest() over the id upper-cased
    // with .NET's invariant (one to one) mapping, written out by hand below.
    assert_eq!(hash_cookie_value("dest-A"), "615d6cd1b28160f0");
    assert_eq!(hash_cookie_value("dest-C"), "435025e33cab55ca");
    assert_eq!(hash_cookie_value("d1"), "3ca257a575bfff71"); // "D1"
    assert_eq!(hash_cookie_value("D1"), "3ca257a575bfff71");
    assert_eq!(hash_cookie_value("d2"), "eb4f7569e28edc50"); // "D2"
    assert_eq!(hash_cookie_value(""), "ef46db3751d8e999");
    assert_eq!(hash_cookie_value("straße"), "07a9dbedf2e2b41e"); // "STRAßE", not "STRASSE"
    assert_eq!(hash_cookie_value("İstanbul"), "07cfa7c076a0a1ff"); // "İSTANBUL"
    assert_eq!(hash_cookie_value("ıi"), "995f41415586dc51"); // "ıI": U+0131 stays
    assert_eq!(hash_cookie_value("d😀"), "bb78f02c958a183b"); // "D😀", a surrogate pair
    assert_eq!(hash_cookie_value("\u{1FB3}x"), "195e513424cbfbaf"); // "\u{1FBC}X"
}

#[test]
fn arr_cookie_vectors() {
    // From YARP's own tests (ArrCookieSessionAffinityPolicyTests: "dest-B").
    assert_eq!(
        arr_cookie_value("dest-B"),
        "920A160FA519353932B655488361A944531650016793761EE7224DE632863B13"
    );
    // Computed independently with Python's hashlib:
    // hashlib.sha256(s.encode('utf-16-le')).hexdigest().upper() over the lower-cased id.
    assert_eq!(
        arr_cookie_value("dest-A"),
        "CE3762A8E5BFB452C5071CC80C81E9C89A87369B0E8F7866CB437C1A181A865F"
    );
    assert_eq!(
        arr_cookie_value("D1"),
        "E1A81620F938713C58BD2D3627E2FD60538B502CCE1E2DF25C6D79F2F7F8EDAF"
    );
    assert_eq!(
        arr_cookie_value(""),
        "E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855"
    );
    // "İstanbul": U+0130 stays itself under .NET's invariant lower-casing.
    assert_eq!(
        arr_cookie_value("İSTANBUL"),
        "A143439EC5B81F5C927CEFBA479645B5E486C97681EBA13549BE656D10F8B003"
    );
    assert_eq!(
        arr_cookie_value("STRAßE"),
        "BE0758DD908EF851B81E064E4643099028A1B6ED9B7876DCF1964EFBBE028D49"
    );
    assert_eq!(
        arr_cookie_value("d😀"),
        "7DB7DFFBB2CF5BE1AF6372DA14E7EF30EAAC901A40825A21DB4F82B777492BD1"
    );
}

/// YARP's tests' configuration: the exact `Set-Cookie` they expect for "dest-B".
const YARP_TEST_COOKIE: &str = r#", "FailurePolicy": "Return503Error", "Cookie": {
    "Domain": "mydomain.my", "HttpOnly": false, "IsEssential": true, "MaxAge": "01:00:00",
    "Path": "/some", "SameSite": "Lax", "SecurePolicy": "Always" }"#;

#[test]
fn set_cookie_matches_yarp_tests() {
    for (policy, value) in [
        ("HashCookie", "53c079ed4c377b0d"),
        (
            "ArrCookie",
            "920A160FA519353932B655488361A944531650016793761EE7224DE632863B13",
        ),
    ] {
        let state = state(
            &affinity(policy, YARP_TEST_COOKIE),
            &["dest-A", "dest-B", "dest-C"],
        );
        let snapshot = state.snapshot();
        let (r, s) = run(routed(&snapshot, &[("cookie", "Some-Cookie=ZZZ")])).unwrap();
        assert!(s.writes_key());
        let response = respond(&r, s, 1);
        assert_eq!(
            set_cookies(&response),
            vec![format!(
                "My.Affinity={value}; max-age=3600; domain=mydomain.my; path=/some; secure; samesite=lax"
            )],
            "{policy}"
        );
    }
}

// ---- Cookie attributes ----

fn cookie_for(affinity_json: &str, request: Request<()>) -> Vec<String> {
    let state = state(affinity_json, DESTS);
    let snapshot = state.snapshot();
    let c = cluster_index(&snapshot, "c1");
    let routed = Routed {
        request,
        context: RouteContext::new(snapshot.clone(), 0, c, Candidates::all(3)),
    };
    let (r, s) = run(routed).unwrap();
    set_cookies(&respond(&r, s, 0))
}

fn tls_request() -> Request<()> {
    let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
    let mut request = Request::new(());
    request.extensions_mut().insert(ConnectionInfo {
        remote: addr,
        local: addr,
        tls: true,
    });
    request
}

#[test]
fn default_cookie_attributes() {
    let d1 = "3ca257a575bfff71";
    let json = affinity("HashCookie", "");
    assert_eq!(
        cookie_for(&json, Request::new(())),
        vec![format!("My.Affinity={d1}; path=/; httponly")]
    );
    // SameAsRequest (the default): secure over TLS, or for an https URI.
    assert_eq!(
        cookie_for(&json, tls_request()),
        vec![format!("My.Affinity={d1}; path=/; secure; httponly")]
    );
    let https = Request::builder()
        .uri("https://example.com/x")
        .body(())
        .unwrap();
    assert_eq!(
        cookie_for(&json, https),
        vec![format!("My.Affinity={d1}; path=/; secure; httponly")]
    );
}

#[test]
fn cookie_attribute_options() {
    let d1 = "3ca257a575bfff71";
    let none = affinity(
        "HashCookie",
        r#", "Cookie": { "SecurePolicy": "None", "SameSite": "None", "HttpOnly": true }"#,
    );
    assert_eq!(
        cookie_for(&none, tls_request()),
        vec![format!("My.Affinity={d1}; path=/; samesite=none; httponly")]
    );
    let always = affinity(
        "HashCookie",
        r#", "Cookie": { "SecurePolicy": "always", "SameSite": "Strict", "Domain": "example.com", "Path": "/app", "MaxAge": "90s" }"#,
    );
    assert_eq!(
        cookie_for(&always, Request::new(())),
        vec![format!(
            "My.Affinity={d1}; max-age=90; domain=example.com; path=/app; secure; samesite=strict; httponly"
        )]
    );
}

#[test]
fn cookie_expires_is_now_plus_expiration() {
    let state = state(
        &affinity(
            "HashCookie",
            r#", "Cookie": { "Expiration": "1.00:00:00", "MaxAge": "00:30:00" }"#,
        ),
        DESTS,
    );
    let snapshot = state.snapshot();
    let cluster = snapshot.cluster("c1").unwrap();
    let settings = cluster.affinity().unwrap();
    // RFC 9110's example date, one day after `now`.
    let now = UNIX_EPOCH + Duration::from_secs(784_111_777 - 86_400);
    let (name, value) = settings.response_header(1, true, || now).unwrap();
    assert_eq!(name, SET_COOKIE);
    assert_eq!(
        value,
        "My.Affinity=eb4f7569e28edc50; expires=Sun, 06 Nov 1994 08:49:37 GMT; max-age=1800; path=/; secure; httponly"
    );
    // Through the stage, with the real clock.
    let (r, s) = run(routed(&snapshot, &[])).unwrap();
    let before = SystemTime::now();
    let cookie = set_cookies(&respond(&r, s, 0)).pop().unwrap();
    let mut expected = String::new();
    cookie::write_imf_fixdate(&mut expected, Some(before + Duration::from_secs(86_400)));
    let mut later = String::new();
    cookie::write_imf_fixdate(
        &mut later,
        Some(SystemTime::now() + Duration::from_secs(86_400)),
    );
    assert!(
        cookie.contains(&format!("; expires={expected};"))
            || cookie.contains(&format!("; expires={later};")),
        "{cookie}"
    );
}
