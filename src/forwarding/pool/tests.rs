use super::h1::H1;
use super::*;
use http_body_util::{Empty, Full};

/// Counts its wake-ups.
#[derive(Default)]
struct Count(std::sync::atomic::AtomicUsize);

impl std::task::Wake for Count {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn counted() -> (Arc<Count>, Waker) {
    let count = Arc::new(Count::default());
    (count.clone(), Waker::from(count))
}

/// A request armed for the keep-alive replay comes back as it went out: method,
/// target (origin or absolute form), every header in order with repeated names,
/// non-ASCII bytes and sensitivity kept; only once; never when not idempotent.
#[test]
fn a_replayed_request_is_the_request_that_went_out() {
    use http::header::{HeaderValue, COOKIE};
    let mut secret = HeaderValue::from_static("token");
    secret.set_sensitive(true);
    for target in ["/a/b?x=1&y=%20", "http://10.0.0.1:8080/p?q", "*"] {
        let method = if target == "*" {
            http::Method::OPTIONS
        } else {
            http::Method::GET
        };
        let request = Request::builder()
            .method(method.clone())
            .uri(target)
            .header("x-one", "1")
            .header(COOKIE, "a=1")
            .header("x-one", "2")
            .header("x-latin", HeaderValue::from_bytes(b"caf\xe9").unwrap())
            .header("x-empty", "")
            .header("authorization", secret.clone())
            .body(Empty::<Bytes>::new())
            .unwrap();
        let mut replay = Replay::default();
        // Armed twice on one connection: the second head replaces the first.
        replay.arm(
            &Request::get("/first")
                .header("x-old", "o")
                .body(Empty::<Bytes>::new())
                .unwrap(),
        );
        replay.disarm();
        replay.arm(&request);
        let again: Request<Empty<Bytes>> = replay.take().expect("armed");
        assert_eq!(again.method(), method);
        assert_eq!(again.uri(), request.uri(), "{target}");
        let sent: Vec<_> = request.headers().iter().collect();
        let replayed: Vec<_> = again.headers().iter().collect();
        assert_eq!(replayed, sent);
        let auth = again.headers().get("authorization").unwrap();
        assert!(auth.is_sensitive());
        assert!(!again.headers().get(COOKIE).unwrap().is_sensitive());
        assert!(replay.take::<Empty<Bytes>>().is_none(), "once");
    }
    let mut replay = Replay::default();
    replay.arm(&Request::post("/").body(Empty::<Bytes>::new()).unwrap());
    assert!(
        replay.take::<Empty<Bytes>>().is_none(),
        "POST is not sent again"
    );
    replay.arm(
        &Request::get("/")
            .body(Full::new(Bytes::from_static(b"x")))
            .unwrap(),
    );
    assert!(
        replay.take::<Full<Bytes>>().is_none(),
        "nor a request with a body"
    );
}

#[test]
fn a_limit_queues_in_order_and_passes_an_unused_turn_on() {
    let limit = Limit::new(1);
    let first = limit.try_open().expect("below the limit");
    assert!(limit.try_open().is_none(), "at the limit");
    let ((a_count, a), (b_count, b)) = (counted(), counted());
    let (mut a_ticket, mut b_ticket) = (None, None);
    assert!(limit.open_or_queue(&a, &mut a_ticket).is_none());
    assert!(limit.open_or_queue(&b, &mut b_ticket).is_none());
    assert!(limit.queued());
    assert!(limit.try_open().is_none(), "a newcomer queues behind them");
    // The connection closes: the first in the queue is woken, and its turn it is.
    drop(first);
    assert_eq!(a_count.0.load(Ordering::SeqCst), 1);
    assert_eq!(b_count.0.load(Ordering::SeqCst), 0);
    assert!(
        limit.open_or_queue(&b, &mut b_ticket).is_none(),
        "not b's turn"
    );
    // `a` gives up without taking its turn: it passes to `b`.
    drop(a_ticket);
    assert_eq!(b_count.0.load(Ordering::SeqCst), 1);
    let second = limit.open_or_queue(&b, &mut b_ticket).expect("b's turn");
    assert!(b_ticket.is_none() && !limit.queued());
    // A connection coming back to the pool wakes the first one queued.
    let (c_count, c) = counted();
    let mut c_ticket = None;
    assert!(limit.open_or_queue(&c, &mut c_ticket).is_none());
    limit.wake_one();
    assert_eq!(c_count.0.load(Ordering::SeqCst), 1);
    Ticket::leave(&mut c_ticket);
    drop(second);
    assert!(limit.try_open().is_some(), "below the limit again");
}

fn key(authority: &'static str) -> Key {
    Key {
        https: false,
        authority: Authority::from_static(authority),
        version: UpstreamVersion::Http1,
        accept_any_certificate: false,
        tls: TlsVersions::Both,
        multiple_h2: false,
        proxy: None,
    }
}

#[test]
fn sweeps_forget_pools_nothing_uses() {
    let pools = Pools::<Empty<Bytes>>::new(
        crate::server::Http1Engine::Hyper,
        Default::default(),
        Default::default(),
    );
    let kept = pools.pool(key("127.0.0.1:1"));
    drop(pools.pool(key("127.0.0.1:2")));
    assert!(
        Arc::ptr_eq(&kept, &pools.pool(key("127.0.0.1:1"))),
        "one pool per key"
    );
    let mut map = pools.pools.lock().unwrap();
    assert_eq!(map.pools.len(), 2);
    sweep(&mut map.pools);
    assert_eq!(map.pools.len(), 1, "the unused pool is forgotten");
    assert!(map.pools.contains_key(&key("127.0.0.1:1")));
}

#[tokio::test]
async fn idle_connections_past_the_timeout_are_closed_oldest_first() {
    let pools = Pools::<Empty<Bytes>>::new(
        crate::server::Http1Engine::Hyper,
        Default::default(),
        Default::default(),
    );
    let pool = pools.pool(key("127.0.0.1:1"));
    let slot = || -> Pin<Box<dyn H1Slot<Empty<Bytes>>>> {
        Box::pin(H1 {
            pool: Arc::downgrade(&pool),
            link: Link::None,
            pending: None,
            in_flight: None,
            send: |s: &mut http1::SendRequest<Empty<Bytes>>, r| s.try_send_request(r),
            reused: true,
            replay: Replay::default(),
            idle_hint: None,
            timer: Deadline::new(),
        })
    };
    let t0 = Instant::now();
    let second = Duration::from_secs(1);
    let mut idle: Vec<Idle<Empty<Bytes>>> = [t0, t0, t0 + 60 * second]
        .into_iter()
        .map(|since| Idle::new(slot(), since, IDLE_TIMEOUT))
        .collect();
    drop_expired(&mut idle, t0 + IDLE_TIMEOUT - second);
    assert_eq!(idle.len(), 3, "nothing has been idle for the timeout yet");
    drop_expired(&mut idle, t0 + IDLE_TIMEOUT);
    assert_eq!(idle.len(), 1, "the two oldest are closed");
    assert_eq!(
        idle[0].expires,
        Some(t0 + 60 * second + IDLE_TIMEOUT),
        "the youngest is kept"
    );
    drop_expired(&mut idle, t0 + 60 * second + IDLE_TIMEOUT);
    assert!(idle.is_empty());

    // One kept for less than the pool's timeout (its destination's `Keep-Alive`) goes
    // with the older ones that expire, wherever it lies.
    let mut idle: Vec<Idle<Empty<Bytes>>> = vec![
        Idle::new(slot(), t0, IDLE_TIMEOUT),
        Idle::new(slot(), t0 + second, IDLE_TIMEOUT),
        Idle::new(slot(), t0 + 2 * second, 4 * second),
        Idle::new(slot(), t0 + 3 * second, IDLE_TIMEOUT),
    ];
    drop_expired(&mut idle, t0 + 10 * second);
    assert_eq!(idle.len(), 4, "only the oldest is looked at");
    drop_expired(&mut idle, t0 + IDLE_TIMEOUT);
    let left: Vec<_> = idle.iter().map(|i| i.expires).collect();
    assert_eq!(
        left,
        [
            Some(t0 + second + IDLE_TIMEOUT),
            Some(t0 + 3 * second + IDLE_TIMEOUT)
        ]
    );
}

#[test]
fn a_destination_s_keep_alive_timeout_reads_as_a_shorter_wait() {
    let hint = |value: &str| {
        let mut headers = http::HeaderMap::new();
        headers.insert("keep-alive", value.parse().unwrap());
        idle_hint(&headers)
    };
    let second = Duration::from_secs(1);
    assert_eq!(hint("timeout=5"), Some(4 * second), "Node.js");
    assert_eq!(hint("timeout=5, max=100"), Some(4 * second), "Apache httpd");
    assert_eq!(hint("max=100,Timeout=2"), Some(second));
    assert_eq!(hint("timeout=1"), Some(second / 2));
    assert_eq!(hint("timeout=0"), Some(Duration::ZERO));
    for unread in [
        "timeout=",
        "timeout=-1",
        "timeout=1.5",
        "max=5",
        "timeout=99999999999",
    ] {
        assert_eq!(hint(unread), None, "{unread}");
    }
    assert_eq!(idle_hint(&http::HeaderMap::new()), None);
}

#[test]
fn keys_hash_and_compare_on_the_authority_as_written() {
    use std::hash::BuildHasher;
    let build = FxBuild::default();
    assert_eq!(
        build.hash_one(key("a.example:80")),
        build.hash_one(key("a.example:80"))
    );
    assert_ne!(key("a.example:80"), key("a.example:81"));
    let mut h2 = key("a.example:80");
    h2.version = UpstreamVersion::Http2;
    assert_ne!(key("a.example:80"), h2);
    assert_ne!(
        build.hash_one(key("a.example:80")),
        build.hash_one(h2.clone())
    );
    let mut negotiate = key("a.example:80");
    negotiate.version = UpstreamVersion::Negotiate;
    assert_ne!(h2, negotiate);
    assert_ne!(build.hash_one(h2), build.hash_one(negotiate));
}

#[test]
fn requests_are_reshaped_for_the_version_a_destination_chose() {
    let target: Uri = "https://d.example:8443".parse().unwrap();
    let h1 = |host: Option<&'static str>| {
        let mut r = Request::builder()
            .uri("/p?q=1")
            .version(http::Version::HTTP_11);
        if let Some(host) = host {
            r = r.header(http::header::HOST, host);
        }
        r.body(Empty::<Bytes>::new()).unwrap()
    };
    // HTTP/1.1 -> HTTP/2: the absolute URI; a `Host` that is the authority goes.
    let r = shape(h1(Some("d.example:8443")), UpstreamVersion::Http2, &target);
    assert_eq!(r.version(), http::Version::HTTP_2);
    assert_eq!(r.uri(), "https://d.example:8443/p?q=1");
    assert!(r.headers().get(http::header::HOST).is_none());
    // Another `Host` (configured, or the client's) stays.
    let r = shape(h1(Some("other.example")), UpstreamVersion::Http2, &target);
    assert_eq!(r.headers()[http::header::HOST], "other.example");
    // HTTP/2 -> HTTP/1.1: the origin form, `Host` the authority unless set.
    let h2 = shape(h1(None), UpstreamVersion::Http2, &target);
    let r = shape(h2, UpstreamVersion::Http1, &target);
    assert_eq!(r.version(), http::Version::HTTP_11);
    assert_eq!(r.uri(), "/p?q=1");
    assert_eq!(r.headers()[http::header::HOST], "d.example:8443");
    let h2 = shape(h1(Some("other.example")), UpstreamVersion::Http2, &target);
    let r = shape(h2, UpstreamVersion::Http1, &target);
    assert_eq!(r.headers()[http::header::HOST], "other.example");
    // Already shaped: unchanged.
    let r = shape(h1(Some("x")), UpstreamVersion::Http1, &target);
    assert_eq!(
        (r.uri().to_string().as_str(), r.version()),
        ("/p?q=1", http::Version::HTTP_11)
    );
}

#[test]
fn a_held_back_body_goes_at_once_on_http2() {
    let target: Uri = "https://d.example".parse().unwrap();
    let mut request = Request::builder()
        .uri("/upload")
        .header(http::header::EXPECT, "100-continue")
        .body(Full::new(Bytes::from_static(b"body")))
        .unwrap();
    let gate = crate::forwarding::expect::hold_back(&mut request).expect("held back");
    let _ = shape(request, UpstreamVersion::Http2, &target);
    // Open: a final response no longer finds the body held back.
    assert!(gate.final_response().is_none());
}

/// A request body fed by the test, chunk by chunk.
struct Fed(tokio::sync::mpsc::UnboundedReceiver<Bytes>);

impl Default for Fed {
    fn default() -> Self {
        Fed(tokio::sync::mpsc::unbounded_channel().1)
    }
}

impl Body for Fed {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.0
            .poll_recv(cx)
            .map(|chunk| chunk.map(|c| Ok(Frame::data(c))))
    }
}

/// A destination that answers in full while the request body is still coming and then
/// resets the connection (closes it with the body unread) after the answer's head has
/// been handed on: the native client stops sending and reads the rest of the answer,
/// which came before the reset, instead of failing it.
#[tokio::test]
async fn an_answer_read_in_full_when_the_destination_resets_under_the_request_body() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let authority: &'static str = Box::leak(listener.local_addr().unwrap().to_string().into());
    let (reset, reset_now) = tokio::sync::oneshot::channel::<()>();
    let destination = tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut s, _) = listener.accept().await.unwrap();
        let mut head = Vec::new();
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let mut buf = [0u8; 4096];
            let n = s.read(&mut buf).await.unwrap();
            assert!(n > 0);
            head.extend_from_slice(&buf[..n]);
        }
        s.write_all(b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 8\r\n\r\ntoo big!")
            .await
            .unwrap();
        let _ = reset_now.await;
        // Closed with the body unread, and no lingering: a reset.
        s.set_zero_linger().unwrap();
    });
    let pools = Pools::<Fed>::new(
        crate::server::Http1Engine::Native,
        Default::default(),
        Default::default(),
    );
    let pool = pools.pool(key(authority));
    let (feed, fed) = tokio::sync::mpsc::unbounded_channel();
    let request = Request::post(format!("http://{authority}/"))
        .header(http::header::CONTENT_LENGTH, "1000000")
        .body(Fed(fed))
        .unwrap();
    let mut exchange = pool.send(request, false, &mut Added::default());
    feed.send(Bytes::from(vec![b'x'; 1000])).unwrap();
    let limit = Duration::from_secs(10);
    let response = tokio::time::timeout(
        limit,
        std::future::poll_fn(|cx| exchange.as_mut().poll_response(cx)),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(response.status(), 413);
    // The reset comes; the next bytes of the body meet it.
    reset.send(()).unwrap();
    tokio::time::timeout(limit, destination)
        .await
        .unwrap()
        .unwrap();
    feed.send(Bytes::from(vec![b'x'; 64 * 1024])).unwrap();
    std::future::poll_fn(|cx| {
        exchange.as_mut().poll_connection(cx);
        Poll::Ready(())
    })
    .await;
    let mut body = Vec::new();
    while let Some(frame) = tokio::time::timeout(
        limit,
        std::future::poll_fn(|cx| exchange.as_mut().poll_frame(cx)),
    )
    .await
    .unwrap()
    {
        body.extend_from_slice(&frame.expect("the answer's body").into_data().unwrap());
    }
    assert_eq!(body, b"too big!");
}
