//! The embedded demo: two small backends on 127.0.0.1 and the proxy in front of them.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;

use super::{BoxError, DEFAULT_LISTEN};
use crate::admin::Readiness;
use crate::config::{parse, Format};
use crate::pipeline;
use crate::server::Server;
use crate::state::ProxyState;

pub(super) async fn run(args: &super::Args) -> Result<(), BoxError> {
    let signals = crate::server::Signals::new();
    let a = spawn_backend("backend-a").await?;
    let b = spawn_backend("backend-b").await?;
    let config = parse(&demo_config(a, b), Format::Json)?;
    let state = Arc::new(ProxyState::new(config)?);
    let addrs = if args.listen.is_empty() {
        vec![DEFAULT_LISTEN.parse()?]
    } else {
        args.listen.clone()
    };
    let server = args.connection_settings(Server::bind(&addrs).await?);
    let proxy = server.local_addrs()[0];
    let readiness = Readiness::starting();
    let admin_task = super::spawn_admin(args.admin, &state, &readiness).await?;
    let mut text = format!(
        "fuseway demo: proxy on http://{proxy}, backends on http://{a} and http://{b}\n\
         Try:\n\
         \x20 curl -i http://{proxy}/hello              # route `all` -> cluster `main` -> backend-a\n\
         \x20 curl -i http://{proxy}/b/anything         # route `b` -> cluster `second` -> backend-b\n\
         \x20 curl -i --http2-prior-knowledge http://{proxy}/hello   # h2c to the proxy\n\
         \x20 curl -i -H 'Host: api.example.com' http://{proxy}/x    # host route `api`\n"
    );
    for addr in admin_task.addrs() {
        text.push_str(&format!(
            "Status page: http://{addr}/ (also /status.json, /metrics)\n"
        ));
    }
    text.push_str("Ctrl-C to stop.\n");
    // A closed stdout must not stop the proxy (`println!` would panic).
    let _ = std::io::Write::write_all(&mut std::io::stdout(), text.as_bytes());
    let service = pipeline::FusedDefault::from_state(state);
    let shutdown = super::lifecycle::drain_on_signal(signals, readiness.clone(), args.drain_delay);
    super::ready(&readiness);
    server.serve(service, shutdown).await?;
    admin_task.stop().await;
    Ok(())
}

fn demo_config(a: SocketAddr, b: SocketAddr) -> String {
    format!(
        r#"{{
  "ReverseProxy": {{
    "Routes": {{
      "all": {{ "ClusterId": "main", "Match": {{ "Path": "/{{**catch-all}}" }} }},
      "b": {{ "ClusterId": "second", "Match": {{ "Path": "/b/{{**rest}}" }} }},
      "api": {{ "ClusterId": "second", "Match": {{ "Hosts": ["api.example.com"] }} }}
    }},
    "Clusters": {{
      "main": {{ "Destinations": {{ "a": {{ "Address": "http://{a}/" }} }} }},
      "second": {{ "Destinations": {{ "b": {{ "Address": "http://{b}/" }} }} }}
    }}
  }}
}}"#
    )
}

async fn spawn_backend(name: &'static str) -> Result<SocketAddr, BoxError> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let svc = service_fn(move |req: Request<Incoming>| async move {
                let body = format!(
                    "hello from {name}: {} {} (host {:?}, x-forwarded-for {:?})\n",
                    req.method(),
                    req.uri(),
                    req.headers().get("host"),
                    req.headers().get("x-forwarded-for"),
                );
                Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(body))))
            });
            tokio::spawn(async move {
                let _ = auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    Ok(addr)
}
