//! A service's `/metrics` for Prometheus, with resilience4j's names so that its Grafana
//! dashboard works as it is: metrics-exporter-prometheus's recorder, rendered by an axum
//! route on a loopback port. A breaker on a model that fails opens; the example then
//! scrapes itself once over HTTP, prints the breaker's series and exits.
//!
//! ```text
//! cargo run --example prometheus            # scrape once and exit
//! cargo run --example prometheus -- --serve # keep serving /metrics for a Prometheus
//! ```

use std::time::Duration;

use metrics_exporter_prometheus::PrometheusBuilder;
use tokio::net::TcpListener;
use tower::{service_fn, Layer, Service, ServiceExt};
use tower_circuit_breaker::config::RateWindow;
use tower_circuit_breaker::metrics::{Metrics, Naming};
use tower_circuit_breaker::Builder;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), tower::BoxError> {
    // The recorder first: series are described when the first breaker is built.
    let handle = PrometheusBuilder::new().install_recorder()?;
    let breaker = Builder::new()
        .name("model")
        .failure_rate(0.5, RateWindow::Calls(4), 4)
        .slow_call_threshold(Duration::from_millis(50))
        .metrics_with(
            Metrics::new()
                .naming(Naming::Resilience4j)
                .call_durations(true),
        )
        .build()?;

    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || std::future::ready(handle.render())),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    println!("serving http://{addr}/metrics");

    // A model that answers twice (once slowly), then fails twice: half of the last four
    // calls failed, so the breaker opens, and the fifth call is not made.
    let mut model = breaker.layer(service_fn(|n: u32| async move {
        if n == 1 {
            tokio::time::sleep(Duration::from_millis(80)).await;
        }
        match n {
            0 | 1 => Ok(format!("answer {n}")),
            _ => Err(std::io::Error::other("503 Service Unavailable")),
        }
    }));
    for n in 0..5 {
        let result = model.ready().await?.call(n).await;
        println!(
            "call {n}: {}",
            if result.is_ok() {
                "answered"
            } else {
                "failed or not made"
            }
        );
    }
    println!("breaker: {}", breaker.handle().state());

    let body = scrape(&addr.to_string()).await?;
    for line in body
        .lines()
        .filter(|line| line.starts_with("resilience4j_circuitbreaker_"))
    {
        println!("{line}");
    }
    if std::env::args().any(|arg| arg == "--serve") {
        println!("serving until interrupted");
        server.await??;
    }
    Ok(())
}

/// `GET /metrics`, as Prometheus does, bounded: the body.
async fn scrape(addr: &str) -> Result<String, tower::BoxError> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()?;
    let response = client.get(format!("http://{addr}/metrics")).send().await?;
    Ok(response.error_for_status()?.text().await?)
}
