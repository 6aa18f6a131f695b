use clap::Parser;
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = fuseway::cli::Args::parse();
    if let Err(e) = fuseway::cli::run(args).await {
        eprintln!("fuseway: {e}");
        std::process::exit(1);
    }
}
