//! The metrics as Prometheus scrapes them: metrics-exporter-prometheus's recorder, its
//! text served on `/metrics` by an axum route on a loopback port, scraped over real HTTP.
//! Every documented series, in both namings, with its labels and value, after calls that
//! open a breaker (the slow-call and buffered-call series resilience4j's Grafana
//! dashboard reads included).

use std::collections::BTreeMap;
use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tower::{service_fn, Layer, Service, ServiceExt};
use tower_circuit_breaker::config::RateWindow;
use tower_circuit_breaker::metrics::{Metrics, Naming, Series};
use tower_circuit_breaker::{Builder, State};

/// Serves `handle`'s text on `/metrics` on a loopback port, as an application would.
async fn serve(handle: PrometheusHandle) -> String {
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || std::future::ready(handle.render())),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("{addr}")
}

/// `GET /metrics` over TCP, bounded: the body.
async fn scrape(addr: &str) -> String {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let request = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        response
    };
    let response = tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .expect("the scrape answered within 10 s");
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_string()
}

/// The samples of a scrape: `name{labels}` (labels sorted) to value, and each series'
/// `# TYPE`.
struct Scrape {
    samples: BTreeMap<(String, BTreeMap<String, String>), String>,
    types: BTreeMap<String, String>,
}

impl Scrape {
    fn parse(text: &str) -> Scrape {
        let mut samples = BTreeMap::new();
        let mut types = BTreeMap::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap();
                types.insert(name.to_string(), kind.to_string());
                continue;
            }
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (series, value) = line.rsplit_once(' ').unwrap();
            let (name, labels) = match series.split_once('{') {
                Some((name, labels)) => (name, labels.trim_end_matches('}')),
                None => (series, ""),
            };
            let labels = labels
                .split(',')
                .filter(|pair| !pair.is_empty())
                .map(|pair| {
                    let (key, value) = pair.split_once('=').unwrap();
                    (key.to_string(), value.trim_matches('"').to_string())
                })
                .collect();
            samples.insert((name.to_string(), labels), value.to_string());
        }
        Scrape { samples, types }
    }

    fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<&str> {
        let labels = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self.samples
            .get(&(name.to_string(), labels))
            .map(String::as_str)
    }
}

/// A breaker named `name`, recording in `naming` with call durations: it opens when half
/// of its last 4 calls failed, and a call slower than 50 ms is slow.
fn breaker(name: &str, naming: Naming) -> tower_circuit_breaker::CircuitBreakerLayer {
    Builder::new()
        .name(name)
        .failure_rate(0.5, RateWindow::Calls(4), 4)
        .slow_call_threshold(Duration::from_millis(50))
        .metrics_with(Metrics::new().naming(naming).call_durations(true))
        .build()
        .unwrap()
}

/// Four calls (fast success, slow success, fast failure, slow failure), which open the
/// breaker, then one rejected call.
async fn open_it(layer: &tower_circuit_breaker::CircuitBreakerLayer) {
    let mut service = layer.layer(service_fn(|(fail, slow): (bool, bool)| async move {
        if slow {
            tokio::time::sleep(Duration::from_millis(80)).await;
        }
        if fail {
            Err(std::io::Error::other("refused"))
        } else {
            Ok(())
        }
    }));
    for call in [
        (false, false),
        (false, true),
        (true, false),
        (true, true),
        (false, false),
    ] {
        let _ = service.ready().await.unwrap().call(call).await;
    }
    assert_eq!(layer.handle().state(), State::Open);
}

/// One expected sample: its series, its labels, its value.
type Row = (Series, Vec<(&'static str, String)>, &'static str);

/// Every series of the module's table, with its labels and value after [`open_it`], in
/// `naming`: the fast success is the one success counted, the slow success counts as a
/// failure (the slow-call rule), so 3 of 4 failed (75 %) and 2 of 4 were slow (50 %).
fn expected(naming: Naming, breaker: &str) -> Vec<Row> {
    let r4j = naming == Naming::Resilience4j;
    let (name_label, kind_label) = if r4j {
        ("name", "kind")
    } else {
        ("breaker", "outcome")
    };
    let (success, failure) = if r4j {
        ("successful", "failed")
    } else {
        ("success", "failure")
    };
    let with = |pairs: &[(&'static str, &str)]| {
        let mut labels = vec![(name_label, breaker.to_string())];
        labels.extend(pairs.iter().map(|(k, v)| (*k, v.to_string())));
        labels
    };
    let mut rows = vec![
        (Series::Calls, with(&[(kind_label, success)]), "1"),
        (Series::Calls, with(&[(kind_label, failure)]), "3"),
        (
            Series::Transitions,
            with(&[("from", "closed"), ("to", "open")]),
            "1",
        ),
        (Series::FailureRate, with(&[]), "75"),
        (Series::BufferedCalls, with(&[(kind_label, success)]), "1"),
        (Series::BufferedCalls, with(&[(kind_label, failure)]), "3"),
        (Series::SlowCalls, with(&[(kind_label, success)]), "0"),
        (Series::SlowCalls, with(&[(kind_label, failure)]), "2"),
        (Series::SlowCallRate, with(&[]), "50"),
    ];
    let rejection: &[(&str, &str)] = if r4j {
        &[("kind", "not_permitted"), ("reason", "open")]
    } else {
        &[("reason", "open")]
    };
    rows.push((Series::Rejections, with(rejection), "1"));
    let observe_only = if r4j { "metrics_only" } else { "observe_only" };
    for state in [
        "closed",
        "open",
        "half_open",
        "forced_open",
        "disabled",
        observe_only,
    ] {
        let value = if state == "open" { "1" } else { "0" };
        rows.push((Series::State, with(&[("state", state)]), value));
    }
    rows
}

#[tokio::test]
async fn a_scrape_over_http_has_every_documented_series_with_its_labels_in_both_namings() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let _local = metrics::set_default_local_recorder(&recorder);
    let ours = breaker("search", Naming::CircuitBreaker);
    let theirs = breaker("model", Naming::Resilience4j);
    open_it(&ours).await;
    open_it(&theirs).await;

    let addr = serve(handle).await;
    let scrape = Scrape::parse(&scrape(&addr).await);

    for (naming, name) in [
        (Naming::CircuitBreaker, "search"),
        (Naming::Resilience4j, "model"),
    ] {
        let rows = expected(naming, name);
        for series in Series::ALL {
            let series_name = series.name(naming);
            if series == Series::CallDuration {
                // A summary by default: its count per outcome is what dashboards read.
                assert_eq!(
                    scrape.types.get(series_name).map(String::as_str),
                    Some("summary")
                );
                let (name_label, kind_label) = match naming {
                    Naming::Resilience4j => ("name", "kind"),
                    _ => ("breaker", "outcome"),
                };
                let failure = if naming == Naming::Resilience4j {
                    "failed"
                } else {
                    "failure"
                };
                let count = format!("{series_name}_count");
                assert_eq!(
                    scrape.value(&count, &[(name_label, name), (kind_label, failure)]),
                    Some("3"),
                    "{count}"
                );
                continue;
            }
            let expected_type = match series {
                Series::Calls | Series::Rejections | Series::Transitions => "counter",
                _ => "gauge",
            };
            assert_eq!(
                scrape.types.get(series_name).map(String::as_str),
                Some(expected_type),
                "# TYPE of {series_name}"
            );
            let of_series: Vec<_> = rows.iter().filter(|(s, ..)| *s == series).collect();
            assert!(!of_series.is_empty(), "{series:?} is checked");
            for (_, labels, value) in of_series {
                let labels: Vec<(&str, &str)> =
                    labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
                assert_eq!(
                    scrape.value(series_name, &labels),
                    Some(*value),
                    "{series_name}{labels:?}"
                );
            }
        }
    }
}

#[tokio::test]
async fn buffered_and_slow_calls_start_at_zero_and_go_back_to_zero_when_the_breaker_closes() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let _local = metrics::set_default_local_recorder(&recorder);
    let layer = breaker("model", Naming::Resilience4j);
    let addr = serve(handle).await;

    let fresh = Scrape::parse(&scrape(&addr).await);
    for kind in ["successful", "failed"] {
        for series in [
            "resilience4j_circuitbreaker_buffered_calls",
            "resilience4j_circuitbreaker_slow_calls",
        ] {
            assert_eq!(
                fresh.value(series, &[("name", "model"), ("kind", kind)]),
                Some("0")
            );
        }
    }
    assert_eq!(
        fresh.value(
            "resilience4j_circuitbreaker_slow_call_rate",
            &[("name", "model")]
        ),
        Some("-1")
    );

    open_it(&layer).await;
    layer.handle().reset();
    let closed = Scrape::parse(&scrape(&addr).await);
    assert_eq!(
        closed.value(
            "resilience4j_circuitbreaker_buffered_calls",
            &[("name", "model"), ("kind", "failed")]
        ),
        Some("0")
    );
    assert_eq!(
        closed.value(
            "resilience4j_circuitbreaker_slow_calls",
            &[("name", "model"), ("kind", "failed")]
        ),
        Some("0")
    );
    assert_eq!(
        closed.value(
            "resilience4j_circuitbreaker_slow_call_rate",
            &[("name", "model")]
        ),
        Some("-1")
    );
}
