use bytes::BytesMut;
use http::{HeaderMap, Method, StatusCode, Version};

use super::decode::MAX_CHUNK_LINE;
use super::encode::{decimal, Connection};
use super::head::BodyLength;
use super::*;

fn limits() -> Limits {
    Limits::new(1024, 128, 100)
}

fn parse(raw: &str) -> Result<Option<RequestHead>, ParseError> {
    parse_request(
        &mut BytesMut::from(raw),
        &limits(),
        HeaderMap::with_capacity,
    )
}

fn head(raw: &str) -> RequestHead {
    parse(raw).expect("valid").expect("complete")
}

fn refused(raw: &str) -> ParseError {
    parse(raw).expect_err(raw)
}

#[test]
fn parses_a_request_head_and_leaves_the_rest() {
    let mut buf = BytesMut::from(
        "GET /a/b?c=d HTTP/1.1\r\nHost: example.com\r\nX-Custom: one\r\nx-custom: two\r\n\r\nNEXT",
    );
    let head = parse_request(&mut buf, &limits(), HeaderMap::with_capacity)
        .unwrap()
        .unwrap();
    assert_eq!(&buf[..], b"NEXT");
    let req = &head.request;
    assert_eq!(req.method(), Method::GET);
    assert_eq!(req.uri().path(), "/a/b");
    assert_eq!(req.uri().query(), Some("c=d"));
    assert_eq!(req.version(), Version::HTTP_11);
    assert_eq!(req.headers()["host"], "example.com");
    let custom: Vec<_> = req.headers().get_all("x-custom").iter().collect();
    assert_eq!(custom, ["one", "two"]);
    assert_eq!(head.body, BodyLength::Length(0));
    assert!(head.keep_alive);
    assert!(!head.expect_continue);
}

#[test]
fn a_partial_head_asks_for_more() {
    assert!(parse("GET / HTTP/1.1\r\nHost: a\r\n").unwrap().is_none());
    assert!(parse("GET / HT").unwrap().is_none());
}

#[test]
fn leading_empty_lines_are_ignored() {
    assert_eq!(
        head("\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n")
            .request
            .uri()
            .path(),
        "/"
    );
}

#[test]
fn host_is_required_once_on_http11() {
    assert_eq!(
        refused("GET / HTTP/1.1\r\n\r\n"),
        ParseError::Bad("no Host header")
    );
    assert_eq!(
        refused("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"),
        ParseError::Bad("more than one Host header")
    );
    // HTTP/1.0 has no such rule, and closes by default.
    let h = head("GET / HTTP/1.0\r\n\r\n");
    assert!(!h.keep_alive);
    assert!(head("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").keep_alive);
    assert!(!head("GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n").keep_alive);
}

#[test]
fn framing_is_refused_when_ambiguous() {
    let bad = |raw: &str| match refused(raw) {
        ParseError::Bad(_) => {}
        other => panic!("{raw:?}: {other:?}"),
    };
    // Content-Length with Transfer-Encoding (CL.TE / TE.CL smuggling).
    bad("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n");
    // Differing lengths, in two fields or one list.
    bad("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\n");
    bad("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4, 5\r\n\r\n");
    bad("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4, 4\r\n\r\n");
    // Not a plain decimal.
    bad("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +4\r\n\r\n");
    bad("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0x4\r\n\r\n");
    bad("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999\r\n\r\n");
    // The final coding is not chunked, or chunked twice.
    bad("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n");
    bad("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n");
    bad("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n");
    bad("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: xchunked\r\n\r\n");
    // Transfer-Encoding in HTTP/1.0.
    bad("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n");
    // Whitespace before the colon, obs-fold, a bare CR.
    bad("GET / HTTP/1.1\r\nHost: a\r\nContent-Length : 4\r\n\r\n");
    bad("GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n c\r\n\r\n");
    bad("GET / HTTP/1.1\r\nHost: a\r\nX-A: b\rc\r\n\r\n");
    // Targets: authority form only for CONNECT, `*` only for OPTIONS.
    bad("GET example.com:80 HTTP/1.1\r\nHost: a\r\n\r\n");
    bad("GET * HTTP/1.1\r\nHost: a\r\n\r\n");
}

#[test]
fn framing_that_is_clear_is_read() {
    let h = head("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nContent-Length: 4\r\n\r\n");
    assert_eq!(h.body, BodyLength::Length(4));
    let h = head("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, Chunked\r\n\r\n");
    assert_eq!(h.body, BodyLength::Chunked);
    let h = head("POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nTE: trailers\r\n\r\n");
    assert!(h.expect_continue && h.accepts_trailers);
    let h = head("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n");
    assert_eq!(h.request.uri().authority().unwrap(), "example.com:443");
    let h = head("GET http://example.com/x HTTP/1.1\r\nHost: example.com\r\n\r\n");
    assert_eq!(h.request.uri().path(), "/x");
    assert_eq!(
        head("OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n").request.uri(),
        "*"
    );
}

#[test]
fn limits_give_414_and_431() {
    let long_target = format!("GET /{} HTTP/1.1\r\nHost: a\r\n\r\n", "a".repeat(200));
    assert_eq!(refused(&long_target), ParseError::UriTooLong);
    // Also before the line is complete.
    assert_eq!(
        refused(&format!("GET /{}", "a".repeat(200))),
        ParseError::UriTooLong
    );
    let big = format!(
        "GET / HTTP/1.1\r\nHost: a\r\nX-Big: {}\r\n\r\n",
        "b".repeat(1100)
    );
    assert_eq!(refused(&big), ParseError::HeadTooLarge);
    assert_eq!(
        refused(&format!("GET / HTTP/1.1\r\nX-Big: {}", "b".repeat(1100))),
        ParseError::HeadTooLarge
    );
    let many: String = (0..101).map(|i| format!("X-{i}: v\r\n")).collect();
    let many = format!("GET / HTTP/1.1\r\nHost: a\r\n{many}\r\n");
    let limits = Limits::new(64 * 1024, 128, 100);
    assert_eq!(
        parse_request(
            &mut BytesMut::from(many.as_str()),
            &limits,
            HeaderMap::with_capacity
        )
        .unwrap_err(),
        ParseError::HeadTooLarge
    );
    assert_eq!(ParseError::UriTooLong.status(), StatusCode::URI_TOO_LONG);
    assert_eq!(
        ParseError::HeadTooLarge.status(),
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE
    );
}

/// Decode everything in `input` (all of it available at once, or one byte at a time).
fn decode_all(
    mut decoder: BodyDecoder,
    input: &[u8],
    bytewise: bool,
) -> Result<Vec<Decoded>, &'static str> {
    let mut buf = BytesMut::new();
    let mut fed = 0;
    let mut out = Vec::new();
    loop {
        match decoder.decode(&mut buf, 1024).map_err(|e| e.0)? {
            Decoded::NeedMore => {
                if fed == input.len() {
                    out.push(decoder.closed().map_err(|e| e.0)?);
                    return Ok(out);
                }
                let n = if bytewise { 1 } else { input.len() - fed };
                buf.extend_from_slice(&input[fed..fed + n]);
                fed += n;
            }
            Decoded::End => {
                out.push(Decoded::End);
                return Ok(out);
            }
            Decoded::Trailers(t) => {
                out.push(Decoded::Trailers(t));
                return Ok(out);
            }
            data => out.push(data),
        }
    }
}

fn data_of(decoded: &[Decoded]) -> Vec<u8> {
    decoded
        .iter()
        .filter_map(|d| match d {
            Decoded::Data(b) => Some(&b[..]),
            _ => None,
        })
        .flatten()
        .copied()
        .collect()
}

#[test]
fn chunked_bodies_decode_whole_or_byte_by_byte() {
    let input = b"5\r\nhello\r\n6;name=value\r\n world\r\n0\r\nX-Trailer: yes\r\n\r\n";
    for bytewise in [false, true] {
        let decoded = decode_all(BodyDecoder::chunked(), input, bytewise).unwrap();
        assert_eq!(data_of(&decoded), b"hello world");
        match decoded.last() {
            Some(Decoded::Trailers(t)) => assert_eq!(t["x-trailer"], "yes"),
            other => panic!("{other:?}"),
        }
    }
    // Spaces and tabs (BWS) may come before an extension.
    let decoded = decode_all(BodyDecoder::chunked(), b"3 \t;e\r\nabc\r\n0\r\n\r\n", true).unwrap();
    assert_eq!(data_of(&decoded), b"abc");
    assert_eq!(decoded.last(), Some(&Decoded::End));
}

#[test]
fn invalid_chunks_are_errors() {
    for input in [
        &b"\r\nabc"[..],              // no size
        b"g\r\n",                     // not hex
        b"11111111111111111\r\n",     // 17 digits
        b"3\nabc\r\n0\r\n\r\n",       // bare LF
        b"3\r\nabcX\r\n0\r\n\r\n",    // data longer than its size
        b"3 4\r\nabc\r\n",            // junk after the size
        b"3;a\x01b\r\nabc\r\n",       // control character in an extension
        b"3\r\nab",                   // closed mid-chunk
        b"0\r\r\n\r\n",               // bare CR before the size line's CRLF
        b"3\x0c\r\nabc\r\n0\r\n\r\n", // form feed after the size (BWS is SP / HTAB)
        b"0\r\n\nGET / HTTP/1.1\r\n", // trailer section ended by a bare LF
        b"0\r\nX-T: 1\nA: b\r\n\r\n", // a trailer line ended by a bare LF
    ] {
        // Whole, and byte by byte (a lone LF or CR waits for what follows it).
        for bytewise in [false, true] {
            assert!(
                decode_all(BodyDecoder::chunked(), input, bytewise).is_err(),
                "{:?} (bytewise: {bytewise})",
                String::from_utf8_lossy(input)
            );
        }
    }
    let long_ext = format!("3;{}\r\nabc\r\n0\r\n\r\n", "e".repeat(MAX_CHUNK_LINE));
    assert_eq!(
        decode_all(BodyDecoder::chunked(), long_ext.as_bytes(), false),
        Err("chunk-size line too long")
    );
}

#[test]
fn length_and_close_delimited_bodies() {
    let decoded = decode_all(BodyDecoder::length(5), b"helloNEXT", false).unwrap();
    assert_eq!(data_of(&decoded), b"hello");
    assert!(decode_all(BodyDecoder::length(5), b"hel", false).is_err());
    let decoded = decode_all(BodyDecoder::until_close(), b"all of it", true).unwrap();
    assert_eq!(data_of(&decoded), b"all of it");
    assert!(BodyDecoder::length(0).is_done());
}

#[test]
fn response_heads_carry_the_framing_we_chose() {
    let mut headers = http::HeaderMap::new();
    headers.insert("content-length", "99".parse().unwrap());
    headers.insert("x-a", "b".parse().unwrap());
    let mut out = Vec::new();
    write_response_head(
        &mut out,
        StatusCode::OK,
        &headers,
        Framing::Chunked,
        Connection::Close,
    );
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.starts_with("HTTP/1.1 200 OK\r\nx-a: b\r\ntransfer-encoding: chunked\r\ndate: "),
        "{text}"
    );
    assert!(
        text.ends_with(" GMT\r\nconnection: close\r\n\r\n"),
        "{text}"
    );
    assert!(!text.contains("content-length"));

    let mut out = Vec::new();
    write_response_head(
        &mut out,
        StatusCode::OK,
        &headers,
        Framing::Bodiless,
        Connection::KeepAlive,
    );
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.contains("content-length: 99\r\n"),
        "HEAD keeps the length: {text}"
    );
    assert!(text.contains("connection: keep-alive\r\n"));

    let mut out = Vec::new();
    write_response_head(
        &mut out,
        StatusCode::NO_CONTENT,
        &headers,
        Framing::Bodiless,
        Connection::Default,
    );
    let text = String::from_utf8(out).unwrap();
    assert!(text.starts_with("HTTP/1.1 204 No Content\r\n"), "{text}");
    assert!(!text.contains("content-length"), "{text}");
    assert!(!text.contains("connection"), "{text}");
    // The value alone (what HTTP/2 sends) is an IMF-fixdate, and so is the line's.
    let date = with_date(|value| String::from_utf8(value.to_vec()).unwrap());
    assert_eq!(date.len(), 29, "{date}");
    assert!(httpdate::parse_http_date(&date).is_ok(), "{date}");
    let at = text.find("\r\ndate: ").expect("a date field") + 8;
    let written = &text[at..at + 29];
    assert!(httpdate::parse_http_date(written).is_ok(), "{text}");
    assert_eq!(&text[at + 29..at + 31], "\r\n", "{text}");

    let mut digits = [0u8; 20];
    assert_eq!(decimal(0, &mut digits), b"0");
    assert_eq!(decimal(u64::MAX, &mut digits), b"18446744073709551615");
    let mut line = [0u8; 18];
    assert_eq!(chunk_header(0x1a2b, &mut line), b"1a2b\r\n");
}

fn response(raw: &str, to_head: bool) -> Result<Option<ResponseHead>, ParseError> {
    parse_response(
        &mut BytesMut::from(raw),
        1024,
        to_head,
        HeaderMap::with_capacity,
    )
}

fn framing_of(raw: &str) -> (ResponseBodyLength, bool) {
    let head = response(raw, false).expect(raw).expect("complete");
    (head.body, head.keep_alive)
}

#[test]
fn response_framing_follows_rfc_9112_section_6_3() {
    use ResponseBodyLength::{Chunked, Length, UntilClose};
    let mut buf = BytesMut::from("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: 1\r\n\r\nhello");
    let head = parse_response(&mut buf, 1024, false, HeaderMap::with_capacity)
        .unwrap()
        .unwrap();
    assert_eq!(head.response.status(), StatusCode::OK);
    assert_eq!(head.response.version(), Version::HTTP_11);
    assert_eq!(head.response.headers()["x-a"], "1");
    assert_eq!((head.body, head.keep_alive), (Length(5), true));
    assert_eq!(&buf[..], b"hello", "the body is left in the buffer");
    assert!(response("HTTP/1.1 200 OK\r\nContent-Le", false)
        .unwrap()
        .is_none());

    assert_eq!(
        framing_of("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"),
        (Chunked, true)
    );
    // Codings without chunked, or no framing at all: until the close.
    assert_eq!(
        framing_of("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n"),
        (UntilClose, false)
    );
    assert_eq!(framing_of("HTTP/1.1 200 OK\r\n\r\n"), (UntilClose, false));
    assert_eq!(
        framing_of("HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n"),
        (Length(1), false),
        "HTTP/1.0 closes unless it says keep-alive"
    );
    assert_eq!(
        framing_of("HTTP/1.0 200 OK\r\nContent-Length: 1\r\nConnection: keep-alive\r\n\r\n"),
        (Length(1), true)
    );
    assert_eq!(
        framing_of("HTTP/1.1 200 OK\r\nContent-Length: 1\r\nConnection: close\r\n\r\n"),
        (Length(1), false)
    );
    // No body after 1xx, 204, 304, or in answer to HEAD, whatever the fields say.
    for raw in [
        "HTTP/1.1 100 Continue\r\n\r\n",
        "HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\n\r\n",
        "HTTP/1.1 304 Not Modified\r\nContent-Length: 99\r\n\r\n",
    ] {
        assert_eq!(framing_of(raw), (Length(0), true), "{raw}");
    }
    let head = response("HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n", true)
        .unwrap()
        .unwrap();
    assert_eq!(head.body, Length(0));
    assert_eq!(
        head.response.headers()["content-length"],
        "99",
        "kept: it describes the resource"
    );
}

#[test]
fn ambiguous_or_malformed_responses_are_refused() {
    for raw in [
        "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\n",
        "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
        "HTTP/1.1 200 OK\r\nX-A: 1\r\n folded\r\n\r\n",
        "HTTP/1.1 200 OK\r\nX-A : 1\r\n\r\n",
        "HTTP/1.1 2x0 OK\r\n\r\n",
        "HTTP/2.0 200 OK\r\n\r\n",
    ] {
        assert!(
            matches!(response(raw, false), Err(ParseError::Bad(_))),
            "{raw:?}"
        );
    }
    let big = format!("HTTP/1.1 200 OK\r\nX-Big: {}\r\n\r\n", "a".repeat(2000));
    assert_eq!(response(&big, false).unwrap_err(), ParseError::HeadTooLarge);
    let partial = format!("HTTP/1.1 200 OK\r\nX-Big: {}", "a".repeat(2000));
    assert_eq!(
        response(&partial, false).unwrap_err(),
        ParseError::HeadTooLarge,
        "a partial head past the limit"
    );
}

#[test]
fn only_its_size_bounds_the_fields_of_a_response_head() {
    let mut many = String::from("HTTP/1.1 200 OK\r\n");
    for i in 0..1000 {
        many.push_str(&format!("Set-Cookie: c{i}=v\r\n"));
    }
    let parse = |raw: &str, max_head| {
        parse_response(
            &mut BytesMut::from(raw),
            max_head,
            false,
            HeaderMap::with_capacity,
        )
    };
    assert!(parse(&many, 1 << 20).unwrap().is_none(), "not complete yet");
    many.push_str("Content-Length: 2\r\n\r\nok");
    let mut buf = BytesMut::from(&many[..]);
    let head = parse_response(&mut buf, 1 << 20, false, HeaderMap::with_capacity)
        .unwrap()
        .unwrap();
    let cookies = head.response.headers().get_all("set-cookie");
    assert_eq!(cookies.iter().count(), 1000);
    assert_eq!(head.body, ResponseBodyLength::Length(2));
    assert_eq!(&buf[..], b"ok");
    assert_eq!(
        parse(&many, many.len() - 10).unwrap_err(),
        ParseError::HeadTooLarge
    );
    assert_eq!(
        parse(&many[..many.len() / 2], many.len() / 4).unwrap_err(),
        ParseError::HeadTooLarge,
        "a partial head past the limit"
    );
}

#[test]
fn request_heads_carry_the_framing_we_chose() {
    let mut headers = HeaderMap::new();
    headers.insert("host", "dest".parse().unwrap());
    headers.insert("content-length", "99".parse().unwrap());
    headers.insert("transfer-encoding", "chunked".parse().unwrap());
    let uri: http::Uri = "/a?b=c".parse().unwrap();
    let none = crate::forwarding::headers::Added::default();
    let head = |framing| {
        let mut out = Vec::new();
        write_request_head(&mut out, &Method::POST, &uri, &headers, &none, framing);
        String::from_utf8(out).unwrap()
    };
    assert_eq!(
        head(RequestFraming::Length(5)),
        "POST /a?b=c HTTP/1.1\r\nhost: dest\r\ncontent-length: 5\r\n\r\n"
    );
    // Fields added beside the map follow the map's.
    let mut added = crate::forwarding::headers::Added::default();
    added.push(
        http::HeaderName::from_static("x-forwarded-for"),
        "10.0.0.1".parse().unwrap(),
    );
    let mut out = Vec::new();
    write_request_head(
        &mut out,
        &Method::GET,
        &uri,
        &HeaderMap::new(),
        &added,
        RequestFraming::Empty,
    );
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "GET /a?b=c HTTP/1.1\r\nx-forwarded-for: 10.0.0.1\r\n\r\n"
    );
    assert_eq!(
        head(RequestFraming::Chunked),
        "POST /a?b=c HTTP/1.1\r\nhost: dest\r\ntransfer-encoding: chunked\r\n\r\n"
    );
    assert_eq!(
        head(RequestFraming::Empty),
        "POST /a?b=c HTTP/1.1\r\nhost: dest\r\ncontent-length: 99\r\n\r\n",
        "no body: the request's own length is kept, Transfer-Encoding is not"
    );
    let mut out = Vec::new();
    let star: http::Uri = "*".parse().unwrap();
    write_request_head(
        &mut out,
        &Method::OPTIONS,
        &star,
        &HeaderMap::new(),
        &none,
        RequestFraming::Empty,
    );
    assert_eq!(out, b"OPTIONS * HTTP/1.1\r\n\r\n");
    // With a scheme (for a proxy): the absolute form.
    let mut out = Vec::new();
    let absolute: http::Uri = "http://dest:8080/a?b=c".parse().unwrap();
    write_request_head(
        &mut out,
        &Method::GET,
        &absolute,
        &HeaderMap::new(),
        &none,
        RequestFraming::Empty,
    );
    assert_eq!(out, b"GET http://dest:8080/a?b=c HTTP/1.1\r\n\r\n");
}

/// Reads `raw` into a map that held the head `earlier` (names kept, values blanked, as
/// the pool gives them back): what a connection's next head gets.
fn parse_after(earlier: &str, raw: &str) -> Result<Option<RequestHead>, ParseError> {
    let first = head(earlier);
    let mut map = first.request.headers().clone();
    for value in map.values_mut() {
        *value = http::HeaderValue::from_static("");
    }
    parse_request(&mut BytesMut::from(raw), &limits(), move |_| map)
}

/// The fields of a map in their order, as (name, value) strings.
fn fields_of(map: &HeaderMap) -> Vec<(String, String)> {
    map.iter()
        .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_owned()))
        .collect()
}

#[test]
fn a_head_with_the_names_of_the_last_one_gets_its_values_in_place() {
    let earlier = "GET / HTTP/1.1\r\nHost: a\r\nUser-Agent: x\r\nX-Id: 1\r\n\r\n";
    // The same names in another case: the kept names are reused.
    let next = "GET / HTTP/1.1\r\nhost: b\r\nuser-agent: y\r\nx-ID: 2\r\n\r\n";
    let reused = parse_after(earlier, next).unwrap().unwrap();
    let fresh = head(next);
    assert_eq!(
        fields_of(reused.request.headers()),
        [("host", "b"), ("user-agent", "y"), ("x-id", "2")]
            .map(|(n, v)| (n.to_owned(), v.to_owned()))
    );
    assert_eq!(
        fields_of(reused.request.headers()),
        fields_of(fresh.request.headers())
    );
}

#[test]
fn a_head_with_other_names_is_read_afresh() {
    let earlier = "GET / HTTP/1.1\r\nHost: a\r\nX-A: 1\r\nX-B: 2\r\n\r\n";
    for next in [
        // Other order, fewer, more, another name, a name twice (one value each kept).
        "GET / HTTP/1.1\r\nX-A: 1\r\nHost: a\r\nX-B: 2\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a\r\nX-A: 1\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a\r\nX-A: 1\r\nX-B: 2\r\nX-C: 3\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a\r\nX-A: 1\r\nX-Bb: 2\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a\r\nX-A: 1\r\nX-A: 2\r\n\r\n",
    ] {
        let reused = parse_after(earlier, next).unwrap().unwrap();
        assert_eq!(
            fields_of(reused.request.headers()),
            fields_of(head(next).request.headers()),
            "{next:?}"
        );
    }
    // A map holding a name twice is never refilled: its order is not the fields'.
    let twice = "GET / HTTP/1.1\r\nX-A: 1\r\nHost: a\r\nX-A: 2\r\n\r\n";
    let next = "GET / HTTP/1.1\r\nX-A: 3\r\nX-A: 4\r\nHost: b\r\n\r\n";
    let reused = parse_after(twice, next).unwrap().unwrap();
    assert_eq!(
        fields_of(reused.request.headers()),
        fields_of(head(next).request.headers())
    );
}

#[test]
fn a_refilled_head_is_checked_like_any_other() {
    let earlier = "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n";
    let next = "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 7\r\n\r\n";
    assert_eq!(
        parse_after(earlier, next).unwrap().unwrap().body,
        BodyLength::Length(7)
    );
    assert_eq!(
        parse_after(
            earlier,
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: x\r\n\r\n"
        )
        .unwrap_err(),
        ParseError::Bad("invalid Content-Length")
    );
    let close = "GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive\r\n\r\n";
    let next = "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
    assert!(!parse_after(close, next).unwrap().unwrap().keep_alive);
    // A value a header value cannot hold is refused as on a fresh read.
    let bad = "GET / HTTP/1.1\r\nHost: a\r\nX-A: \x7f\r\n\r\n";
    assert_eq!(
        parse_after("GET / HTTP/1.1\r\nHost: a\r\nX-A: 1\r\n\r\n", bad).unwrap_err(),
        refused(bad)
    );
}

#[test]
fn a_pooled_map_with_more_values_than_names_is_taken_for_a_larger_head() {
    // An HTTP/2 destination's answer: twenty cookies under one name, in a map grown
    // by appending (room for 6 names), kept for later heads once written.
    let mut cookies = HeaderMap::new();
    for i in 0..20 {
        cookies.append("set-cookie", format!("c{i}=v").parse().unwrap());
    }
    assert!(cookies.len() > 13 && cookies.capacity() < 13);
    buffers::Heads::Responses.release(cookies);
    // A request head of 5 fields and room for 8 more takes it (no request maps kept).
    let map = buffers::Heads::Requests.take(13);
    assert!(map.capacity() >= 13, "{}", map.capacity());
}
