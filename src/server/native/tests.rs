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
