use super::*;

/// What an idle keep-alive connection costs besides its socket is mostly its task:
/// the connection's future, whose size is that of its largest state (the one
/// holding the pipeline's future). Printed for the README; bounded so that it
/// cannot grow unnoticed.
#[test]
fn the_connection_future_size() {
    let config = crate::config::parse(
        r#"{"Routes": {}, "Clusters": {}}"#,
        crate::config::Format::Json,
    )
    .unwrap();
    let state = Arc::new(crate::state::ProxyState::new(config).unwrap());
    let pipeline = crate::pipeline::FusedDefault::from_state(state);
    let info = crate::request::ConnectionInfo {
        remote: ([127, 0, 0, 1], 1).into(),
        local: ([127, 0, 0, 1], 2).into(),
        tls: false,
    };
    let (io, _peer) = tokio::io::duplex(64);
    let drain = super::super::drain::Drain::new(Duration::from_secs(30));
    let future = serve_connection(
        io,
        pipeline,
        info,
        Slots::new(Arc::new(ServerOptions::default())),
        drain.signal(None),
        false,
    );
    let size = std::mem::size_of_val(&future);
    println!(
        "the native connection future: {size} bytes (the pipeline {} bytes, the drain signal {}, the in-flight slot {})",
        std::mem::size_of::<crate::pipeline::FusedDefault>(),
        std::mem::size_of::<Signal>(),
        std::mem::size_of::<InFlight<CallOf<crate::pipeline::FusedDefault>, ProxyBody>>(),
    );
    // 376 bytes in a debug build; 392 in a release build (print-type-sizes), which
    // with tokio's task header and trailer make a 512-byte task (tasks are rounded
    // up to 128 bytes): 8 more would make it 640.
    assert!(size <= 384, "{size} bytes");
    // A parked connection: its record in the lot.
    #[cfg(unix)]
    {
        let parked = std::mem::size_of::<lot::Record>();
        println!("a parked connection: {parked} bytes");
        assert!(parked <= 64, "{parked} bytes");
    }
}

/// `read_client` counts the task registered for the socket's readiness only when a
/// read found the socket not ready: not when tokio's cooperative budget refused the
/// read (nothing was registered with the socket then), and not once a read took bytes.
#[tokio::test]
async fn a_read_is_armed_only_when_the_socket_was_not_ready() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (mut peer, mut io) = crate::testing::tcp_pair(&listener).await;
    let mut buf = BytesMut::new();
    let mut armed = false;
    // Nothing sent: not ready, so registered.
    poll_fn(|cx| {
        assert!(conn::read_client(&mut io, &mut buf, &mut armed, cx).is_pending());
        Poll::Ready(())
    })
    .await;
    assert!(armed);
    // Bytes sent: the task is woken and reads them; no longer registered.
    tokio::io::AsyncWriteExt::write_all(&mut peer, b"GET")
        .await
        .unwrap();
    let n = poll_fn(|cx| conn::read_client(&mut io, &mut buf, &mut armed, cx)).await;
    assert_eq!(n.unwrap(), 3);
    assert!(!armed);
    // More bytes waiting, but the task's budget spent (on a channel's ready
    // messages): the read is refused before it looks at the socket.
    tokio::io::AsyncWriteExt::write_all(&mut peer, b" /")
        .await
        .unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for i in 0..1000 {
        tx.send(i).unwrap();
    }
    // The runtime has seen them arrive (the socket marked ready).
    io.readable().await.unwrap();
    armed = true;
    poll_fn(|cx| {
        while rx.poll_recv(cx).is_ready() {}
        assert!(conn::read_client(&mut io, &mut buf, &mut armed, cx).is_pending());
        Poll::Ready(())
    })
    .await;
    assert!(!armed, "a read the budget refused registered nothing");
    let n = poll_fn(|cx| conn::read_client(&mut io, &mut buf, &mut armed, cx)).await;
    assert_eq!(n.unwrap(), 2);
    assert_eq!(&buf[..], b"GET /");
}
