//! What a run sends and where the target forwards it: the client's protocol, the
//! destination's, and plain requests or gRPC calls.

/// One direction through the proxies.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Scenario {
    /// HTTP/1.1 client, HTTP/1.1 destination.
    H1ToH1,
    /// h2c client, HTTP/1.1 destination.
    H2ToH1,
    /// HTTP/1.1 client, h2c destination.
    H1ToH2,
    /// h2c client, h2c destination.
    H2ToH2,
    /// gRPC unary calls, h2c on both sides.
    Grpc,
}

impl Scenario {
    pub(crate) const ALL: [Scenario; 5] = [
        Scenario::H1ToH1,
        Scenario::H2ToH1,
        Scenario::H1ToH2,
        Scenario::H2ToH2,
        Scenario::Grpc,
    ];

    pub(crate) fn label(self) -> &'static str {
        match self {
            Scenario::H1ToH1 => "1.1>1.1",
            Scenario::H2ToH1 => "h2c>1.1",
            Scenario::H1ToH2 => "1.1>h2c",
            Scenario::H2ToH2 => "h2c>h2c",
            Scenario::Grpc => "grpc",
        }
    }

    /// The load generator's `--http`.
    pub(crate) fn client_http(self) -> u8 {
        match self {
            Scenario::H1ToH1 | Scenario::H1ToH2 => 1,
            _ => 2,
        }
    }

    pub(crate) fn grpc(self) -> bool {
        self == Scenario::Grpc
    }

    /// The scenario whose direct runs are this one's baseline: the client speaking to
    /// the backend in its own protocol (the destination's protocol is the proxy's
    /// business).
    pub(crate) fn baseline(self) -> Scenario {
        match self {
            Scenario::H1ToH2 => Scenario::H1ToH1,
            Scenario::H2ToH2 => Scenario::H2ToH1,
            s => s,
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}
