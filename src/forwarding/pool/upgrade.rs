//! Upgrades (WebSockets): a connection of their own.

use super::*;

pin_project! {
    pub(super) struct Upgrade {
        #[pin]
        response: Connecting<Response<Incoming>>,
        #[pin]
        timer: Deadline,
    }
}

pub(super) fn upgrade_exchange<B: SendBody>(
    pool: &Arc<Pool<B>>,
    request: Request<B>,
) -> BoxExchange {
    let io = pool.connect_io();
    Box::pin(Upgrade {
        response: Box::pin(async move {
            let (mut sender, connection) = http1::Builder::new().handshake(io.await?).await?;
            tokio::spawn(async move {
                if let Err(e) = connection.with_upgrades().await {
                    tracing::debug!(error = %e, "upgrade connection to a destination ended");
                }
            });
            Ok(sender.send_request(request).await?)
        }),
        timer: Deadline::new(),
    })
}

impl Exchange for Upgrade {
    fn poll_response(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Response<ResponseBody>, BoxError>> {
        self.project()
            .response
            .poll(cx)
            .map_ok(|r| r.map(ResponseBody::Hyper))
    }

    fn poll_connection(self: Pin<&mut Self>, _cx: &mut Context<'_>) {}

    fn poll_deadline(self: Pin<&mut Self>, cx: &mut Context<'_>, deadline: Instant) -> Poll<()> {
        self.project().timer.poll_until(cx, deadline)
    }

    fn finish(self: Pin<Box<Self>>, _reusable: bool) {}
}
