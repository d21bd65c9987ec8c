//! The admin service's guard, health path, acts and redaction, over real TCP on
//! loopback: served by hyper, and nested in an axum `Router` (`nest_service`). Reads
//! and acts without credentials, with wrong ones and with the right ones; the health
//! path's 200 and 503; a failure whose URL carries a key and a password, looked for in
//! every output a person or a program outside the process sees (admin JSON, snapshot
//! JSON, the expediter's report, captured `tracing` output, metric labels).
#![cfg(feature = "admin")]

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Method, StatusCode};
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tower::{service_fn, Layer, Service, ServiceExt};
use tower_circuit_breaker::admin::{Admin, HealthRule};
use tower_circuit_breaker::expediter::{Expediter, SubTask, ToolSpec};
use tower_circuit_breaker::{
    CircuitBreakerHandle, CircuitBreakerLayer, KillSwitch, Outcome, State,
};

#[path = "common/admin_server.rs"]
mod admin_server;
use admin_server::AdminServer;

const TOKEN: &str = "s3cret-operator-token";

/// What a reqwest client gets: the status, the `WWW-Authenticate` header, the body.
struct Reply {
    status: StatusCode,
    challenge: Option<String>,
    text: String,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_str(&self.text).expect("a JSON body")
    }
}

/// `method url` with `Authorization: <authorization>` if given, bounded.
async fn send(method: Method, url: &str, authorization: Option<&str>, body: &str) -> Reply {
    let mut request = reqwest::Client::new()
        .request(method, url)
        .body(body.to_string());
    if let Some(value) = authorization {
        request = request.header("authorization", value);
    }
    let response = tokio::time::timeout(Duration::from_secs(5), request.send())
        .await
        .expect("within its bound")
        .expect("an answer");
    let status = response.status();
    let challenge = response
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_string());
    let text = response.text().await.expect("a body");
    Reply {
        status,
        challenge,
        text,
    }
}

/// Two breakers obeying one kill switch.
fn breakers() -> (KillSwitch, CircuitBreakerHandle, CircuitBreakerHandle) {
    let all = KillSwitch::new();
    let handle = |name: &str| {
        CircuitBreakerLayer::builder()
            .name(name)
            .kill_switch(all.clone())
            .build()
            .unwrap()
            .handle()
    };
    let (chat, embed) = (handle("chat"), handle("embed"));
    (all, chat, embed)
}

fn guarded(all: &KillSwitch, chat: &CircuitBreakerHandle, embed: &CircuitBreakerHandle) -> Admin {
    Admin::builder()
        .breakers([chat.clone(), embed.clone()])
        .kill_switch("all-models", all.clone())
        .bearer_token(TOKEN)
        .allow_mutations(true)
        .build()
        .unwrap()
}

/// The admin nested under `/admin` in an axum router, served by axum on loopback.
async fn serve_axum(admin: Admin) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let app = axum::Router::new().nest_service("/admin", admin);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (addr, task)
}

const READS: [&str; 6] = [
    "/",
    "/breakers",
    "/breakers/chat",
    "/kill_switches",
    "/kill_switches/all-models",
    "/health",
];

const ACTS: [(&str, &str); 6] = [
    ("/breakers/chat/force_open", ""),
    ("/breakers/chat/open_for", r#"{"seconds": 30}"#),
    ("/breakers/chat/kill", ""),
    ("/breakers/chat/reset", ""),
    ("/kill_switches/all-models/kill", ""),
    ("/kill_switches/all-models/revive", ""),
];

/// Without credentials or with wrong ones: every read and act is a `401` that names
/// nothing served, and nothing changes. With the token: served, and the acts act.
async fn the_guard_holds(
    url: impl Fn(&str) -> String,
    all: &KillSwitch,
    chat: &CircuitBreakerHandle,
) {
    let wrong = [
        None,
        Some("Bearer wrong-token"),
        Some("Bearer s3cret-operator-toke"),
        Some("Bearer s3cret-operator-token-and-more"),
        Some("Basic czNjcmV0LW9wZXJhdG9yLXRva2Vu"),
        Some("s3cret-operator-token"),
    ];
    for authorization in wrong {
        for path in READS.iter().chain(&["/breakers/nope", "/nowhere"]) {
            let reply = send(Method::GET, &url(path), authorization, "").await;
            assert_eq!(
                reply.status,
                StatusCode::UNAUTHORIZED,
                "GET {path} {authorization:?}"
            );
            assert_eq!(reply.challenge.as_deref(), Some("Bearer"));
            assert_eq!(reply.json()["error"]["code"], "unauthorized");
            assert!(
                !reply.text.contains("chat"),
                "a refusal names nothing: {}",
                reply.text
            );
        }
        for (path, body) in ACTS {
            let reply = send(Method::POST, &url(path), authorization, body).await;
            assert_eq!(
                reply.status,
                StatusCode::UNAUTHORIZED,
                "POST {path} {authorization:?}"
            );
            assert_eq!(reply.json()["error"]["code"], "unauthorized");
        }
        assert_eq!(chat.state(), State::Closed, "no act went through");
        assert!(!all.is_killed(), "no act went through");
    }

    let right = Some("Bearer s3cret-operator-token");
    for path in READS {
        let reply = send(Method::GET, &url(path), right, "").await;
        assert_eq!(reply.status, StatusCode::OK, "GET {path}: {}", reply.text);
        assert_eq!(reply.challenge, None);
    }
    // The scheme's case does not matter (RFC 9110 §11.1).
    let reply = send(
        Method::GET,
        &url("/breakers/chat"),
        Some("bearer s3cret-operator-token"),
        "",
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);

    let act = |path: &'static str, body: &'static str| {
        let url = url(path);
        async move {
            let reply = send(Method::POST, &url, right, body).await;
            assert_eq!(reply.status, StatusCode::OK, "POST {path}: {}", reply.text);
            reply.json()
        }
    };
    let forced = act("/breakers/chat/force_open", "").await;
    assert_eq!(forced["state"], "forced_open");
    assert_eq!(chat.state(), State::ForcedOpen);
    act("/breakers/chat/open_for", r#"{"seconds": 30}"#).await;
    assert!(chat.snapshot().forced_until.is_some());
    act("/breakers/chat/kill", "").await;
    assert!(all.is_killed());
    act("/breakers/chat/reset", "").await;
    assert_eq!(chat.state(), State::Closed);
    act("/kill_switches/all-models/revive", "").await;
    assert!(!all.is_killed());
}

#[tokio::test]
async fn over_hyper_reads_and_acts_need_the_bearer_token_and_a_wrong_one_is_refused() {
    let (all, chat, embed) = breakers();
    let server = AdminServer::start(guarded(&all, &chat, &embed)).await;
    the_guard_holds(|path| server.url(path), &all, &chat).await;
}

#[tokio::test]
async fn nested_in_axum_reads_and_acts_need_the_bearer_token_and_a_wrong_one_is_refused() {
    let (all, chat, embed) = breakers();
    let (addr, task) = serve_axum(guarded(&all, &chat, &embed)).await;
    the_guard_holds(|path| format!("http://{addr}/admin{path}"), &all, &chat).await;
    task.abort();
}

/// An application's route next to the admin in one Router: the route needs no token,
/// the admin does, and a kill through the admin stops the route's breaker until revived.
#[tokio::test]
async fn nested_in_axum_next_to_an_app_route_a_kill_through_the_router_stops_the_apps_calls() {
    let all = KillSwitch::new();
    let layer = CircuitBreakerLayer::builder()
        .name("chat")
        .kill_switch(all.clone())
        .build()
        .unwrap();
    let admin = Admin::builder()
        .breakers([layer.handle()])
        .kill_switch("all-models", all.clone())
        .bearer_token(TOKEN)
        .allow_mutations(true)
        .build()
        .unwrap();
    let chat = layer.layer(service_fn(|_: ()| async {
        Ok::<_, std::io::Error>("answered")
    }));
    let app = axum::Router::new()
        .route(
            "/chat",
            axum::routing::get(move || {
                let chat = chat.clone();
                async move {
                    match chat.oneshot(()).await {
                        Ok(answer) => answer.into_inner().to_string(),
                        Err(error) => format!("not made: {error}"),
                    }
                }
            }),
        )
        .nest_service("/admin", admin);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let url = |path: &str| format!("http://{addr}{path}");
    let bearer = format!("Bearer {TOKEN}");

    let chat_url = url("/chat");
    let chat_now = || send(Method::GET, &chat_url, None, "");
    assert_eq!(
        chat_now().await.text,
        "answered",
        "the app's route needs no token"
    );
    let listed = send(Method::GET, &url("/admin/breakers"), None, "").await;
    assert_eq!(listed.status, StatusCode::UNAUTHORIZED);
    let listed = send(Method::GET, &url("/admin/breakers"), Some(&bearer), "").await;
    assert_eq!(listed.status, StatusCode::OK);
    assert!(listed.text.contains("\"chat\""), "{}", listed.text);

    let killed = send(
        Method::POST,
        &url("/admin/kill_switches/all-models/kill"),
        Some(&bearer),
        "",
    )
    .await;
    assert_eq!(killed.status, StatusCode::OK);
    assert!(all.is_killed());
    let stopped = chat_now().await.text;
    assert!(
        stopped.starts_with("not made:") && stopped.contains("chat"),
        "{stopped}"
    );

    let revived = send(
        Method::POST,
        &url("/admin/kill_switches/all-models/revive"),
        Some(&bearer),
        "",
    )
    .await;
    assert_eq!(revived.status, StatusCode::OK);
    assert_eq!(chat_now().await.text, "answered");
    task.abort();
}

#[tokio::test]
async fn over_hyper_an_authorize_check_of_the_head_guards_reads_and_acts() {
    let (all, chat, embed) = breakers();
    let admin = Admin::builder()
        .breakers([chat.clone(), embed.clone()])
        .kill_switch("all-models", all.clone())
        .authorize(|head| {
            head.headers
                .get("x-operator")
                .is_some_and(|v| v == "on-call")
        })
        .allow_mutations(true)
        .build()
        .unwrap();
    let server = AdminServer::start(admin).await;
    let client = reqwest::Client::new();
    for operator in [None, Some("intruder")] {
        for (method, path) in [
            (Method::GET, "/breakers/chat"),
            (Method::POST, "/breakers/chat/force_open"),
        ] {
            let mut request = client.request(method.clone(), server.url(path));
            if let Some(operator) = operator {
                request = request.header("x-operator", operator);
            }
            let response = request.send().await.unwrap();
            assert_eq!(
                response.status(),
                StatusCode::UNAUTHORIZED,
                "{method} {path} {operator:?}"
            );
            assert!(
                response.headers().get("www-authenticate").is_none(),
                "not a bearer guard"
            );
        }
    }
    assert_eq!(chat.state(), State::Closed);
    let response = client
        .post(server.url("/breakers/chat/force_open"))
        .header("x-operator", "on-call")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(chat.state(), State::ForcedOpen);
}

#[tokio::test]
async fn health_is_guarded_like_the_rest_unless_opened_and_answers_200_or_503_by_its_rule() {
    let (all, chat, embed) = breakers();
    // Guarded by default.
    let server = AdminServer::start(guarded(&all, &chat, &embed)).await;
    let reply = send(Method::GET, &server.url("/health"), None, "").await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    drop(server);

    let admin = Admin::builder()
        .breakers([chat.clone(), embed.clone()])
        .bearer_token(TOKEN)
        .open_health_to_anyone()
        .build()
        .unwrap();
    let server = AdminServer::start(admin).await;
    let health_url = server.url("/health");
    let health = || send(Method::GET, &health_url, None, "");
    // Opened: the probe needs no token, the rest still does.
    let reply = health().await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.json(), json!({ "healthy": true, "unhealthy": [] }));
    assert_eq!(
        send(Method::GET, &server.url("/"), None, "").await.status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        send(Method::POST, &server.url("/health"), None, "")
            .await
            .status,
        StatusCode::UNAUTHORIZED
    );
    let head = reqwest::Client::new()
        .head(server.url("/health"))
        .send()
        .await
        .unwrap();
    assert_eq!(head.status(), StatusCode::OK);

    // The default rule: open, forced open and killed are unhealthy.
    chat.force_open();
    let reply = health().await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        reply.json(),
        json!({ "healthy": false, "unhealthy": [{ "name": "chat", "state": "forced_open", "killed": false }] })
    );
    chat.reset();
    assert_eq!(health().await.status, StatusCode::OK);
    all.kill();
    let reply = health().await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        reply.json()["unhealthy"].as_array().unwrap().len(),
        2,
        "{}",
        reply.text
    );
    all.revive();
    // An opening for a time is a forced opening too; a hint opens the breaker (open).
    embed.hold_open_until(tokio::time::Instant::now().into_std() + Duration::from_secs(60));
    let reply = health().await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(reply.json()["unhealthy"][0]["state"], "open");
    embed.reset();
    assert_eq!(health().await.status, StatusCode::OK);
}

#[tokio::test]
async fn a_health_rule_decides_which_states_count() {
    let (all, chat, embed) = breakers();
    let admin = Admin::builder()
        .breakers([chat.clone(), embed.clone()])
        .open_to_anyone()
        .health_rule(HealthRule::none().state(State::ForcedOpen))
        .build()
        .unwrap();
    let (addr, task) = serve_axum(admin).await;
    let health_url = format!("http://{addr}/admin/health");
    let health = || send(Method::GET, &health_url, None, "");
    all.kill();
    assert_eq!(
        health().await.status,
        StatusCode::OK,
        "a kill is not counted by this rule"
    );
    embed.hold_open_until(tokio::time::Instant::now().into_std() + Duration::from_secs(60));
    assert_eq!(
        health().await.status,
        StatusCode::OK,
        "open is not counted by this rule"
    );
    chat.force_open();
    assert_eq!(health().await.status, StatusCode::SERVICE_UNAVAILABLE);
    task.abort();
}

/// A revive of a shared switch lets through only the breakers whose own state does: one
/// forced open is named as still skipping its calls, never as let through.
#[tokio::test]
async fn a_revive_never_says_it_lets_through_a_breaker_still_forced_open() {
    let (all, chat, embed) = breakers();
    let server = AdminServer::start(guarded(&all, &chat, &embed)).await;
    let right = Some("Bearer s3cret-operator-token");
    for act in [
        "/breakers/embed/force_open",
        "/kill_switches/all-models/kill",
    ] {
        let answer = send(Method::POST, &server.url(act), right, "").await;
        assert_eq!(answer.status, 200, "{act}");
    }
    let revived = send(
        Method::POST,
        &server.url("/breakers/chat/revive"),
        right,
        "",
    )
    .await
    .json();
    assert_eq!(revived["state"], "closed");
    assert_eq!(
        revived["notes"],
        json!([
            "the kill switch is shared: embed is still forced_open on its own and skips its calls"
        ])
    );
    assert_eq!(embed.state(), State::ForcedOpen);
}

#[tokio::test]
async fn a_kill_names_every_breaker_it_stops_and_a_reset_says_the_kill_still_holds() {
    let (all, chat, embed) = breakers();
    let server = AdminServer::start(guarded(&all, &chat, &embed)).await;
    let right = Some("Bearer s3cret-operator-token");
    let killed = send(Method::POST, &server.url("/breakers/chat/kill"), right, "")
        .await
        .json();
    assert_eq!(killed["act"], "kill");
    assert_eq!(
        killed["kill_switch"],
        json!({ "name": "all-models", "killed": true, "breakers": ["chat", "embed"] })
    );
    let note = killed["notes"][0].as_str().unwrap();
    assert!(
        note.contains("also stops embed") && note.contains("force_open"),
        "{note}"
    );
    assert_eq!(
        killed["advice"],
        json!({ "kind": "skip", "reason": "killed" })
    );

    let reset = send(Method::POST, &server.url("/breakers/chat/reset"), right, "")
        .await
        .json();
    assert_eq!(reset["state"], "closed");
    assert_eq!(reset["killed"], true);
    assert_eq!(
        reset["advice"],
        json!({ "kind": "skip", "reason": "killed" }),
        "closed, yet skipped"
    );
    assert_eq!(
        reset["notes"],
        json!(["the kill switch is still on: calls are skipped until it is revived"])
    );
    // The snapshot read later says the same.
    let shown = send(Method::GET, &server.url("/breakers/embed"), right, "")
        .await
        .json();
    assert_eq!(
        (shown["state"].clone(), shown["advice"]["reason"].clone()),
        (json!("closed"), json!("killed"))
    );

    send(
        Method::POST,
        &server.url("/kill_switches/all-models/revive"),
        right,
        "",
    )
    .await;
    let shown = send(Method::GET, &server.url("/breakers/chat"), right, "")
        .await
        .json();
    assert_eq!(shown["advice"], json!({ "kind": "call" }));
    // force_open is this breaker's alone: embed still calls.
    let forced = send(
        Method::POST,
        &server.url("/breakers/chat/force_open"),
        right,
        "",
    )
    .await
    .json();
    assert_eq!(forced["notes"], json!([]));
    assert_eq!(embed.state(), State::Closed);
    assert!(!all.is_killed());
}

#[tokio::test]
async fn a_timed_opening_shows_its_end_and_a_force_open_shows_it_lasts_until_a_reset() {
    let (all, chat, embed) = breakers();
    let server = AdminServer::start(guarded(&all, &chat, &embed)).await;
    let right = Some("Bearer s3cret-operator-token");
    let held = send(
        Method::POST,
        &server.url("/breakers/chat/open_for"),
        right,
        r#"{"seconds": 30}"#,
    )
    .await
    .json();
    assert_eq!(held["state"], "forced_open");
    assert_eq!(held["forced_open"]["until"], "time");
    let ends = held["forced_open"]["ends_in_ms"].as_u64().unwrap();
    assert!(ends <= 30_000 && ends > 25_000, "{ends}");
    // Still shown while the kill switch is on, though only a person ends the skips then.
    all.kill();
    let shown = send(Method::GET, &server.url("/breakers/chat"), right, "")
        .await
        .json();
    assert_eq!(shown["forced_open"]["until"], "time");
    assert_eq!(shown["next_probe"]["kind"], "manual");
    all.revive();

    let forced = send(
        Method::POST,
        &server.url("/breakers/chat/force_open"),
        right,
        "",
    )
    .await
    .json();
    assert_eq!(forced["forced_open"], json!({ "until": "reset" }));
    assert_eq!(forced["next_probe"], json!({ "kind": "manual" }));
    let other = send(Method::GET, &server.url("/breakers/embed"), right, "")
        .await
        .json();
    assert_eq!(other["forced_open"], Value::Null);
}

// ---------------------------------------------------------------------------------
// Secrets.

/// A transport error as reqwest writes it, for a provider that takes its key in the
/// query string, reached through a proxy URL with a password.
const LEAKY: &str =
    "error sending request for url (http://user:pass@127.0.0.1:9/v1/chat/completions?key=SECRET)";

/// What must never be shown.
const SECRETS: [&str; 4] = ["SECRET", "user:pass", "pass@", "hunter2"];

fn assert_no_secret(what: &str, text: &str) {
    for secret in SECRETS {
        assert!(!text.contains(secret), "{what} shows {secret:?}: {text}");
    }
}

/// Every `tracing` event and span, with its target and fields, as text.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<String>>);

struct Fields<'a>(&'a mut String);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, " {}={:?}", field.name(), value);
    }
}

impl tracing::Subscriber for Captured {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        let mut out = self.0.lock().unwrap();
        span.record(&mut Fields(&mut out));
        out.push('\n');
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, values: &tracing::span::Record<'_>) {
        let mut out = self.0.lock().unwrap();
        values.record(&mut Fields(&mut out));
        out.push('\n');
    }
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut out = self.0.lock().unwrap();
        let _ = write!(out, "{}:", event.metadata().target());
        event.record(&mut Fields(&mut out));
        out.push('\n');
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[tokio::test]
async fn a_failure_urls_key_and_password_never_show_in_admin_or_snapshot_json_the_report_tracing_or_metric_labels(
) {
    let captured = Captured::default();
    let _tracing = tracing::subscriber::set_default(captured.clone());
    let recorder = metrics_util::debugging::DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _metrics = metrics::set_default_local_recorder(&recorder);

    // A breaker whose calls fail with the transport error's text (the error's own text
    // becomes the message), observed by an application that logs every failure message.
    let chat_layer = CircuitBreakerLayer::builder()
        .name("chat")
        .failure_threshold(2)
        .metrics()
        .on_event(|event| {
            if let tower_circuit_breaker::Event::Recorded {
                outcome: Outcome::Failure(failure),
                ..
            } = event
            {
                tracing::warn!(target: "app", message = failure.message(), "a call failed");
            }
        })
        .build()
        .unwrap();
    let chat = chat_layer.handle();
    let mut chat_svc = chat_layer.layer(service_fn(|_: ()| async {
        Err::<(), _>(std::io::Error::other(LEAKY))
    }));
    // A breaker whose classifier writes its own message, with a password and a key.
    let search_layer = CircuitBreakerLayer::builder()
        .name("search")
        .metrics()
        .build()
        .unwrap()
        .with_classifier(|result: &Result<(), std::io::Error>| match result {
            Ok(()) => Outcome::Success,
            Err(_) => Outcome::failure_with(
                "GET https://bob:hunter2@search.example/api?key=SECRET&q=rust: 502; Authorization: Bearer hunter2",
            ),
        });
    let search = search_layer.handle();
    let mut search_svc = search_layer.layer(service_fn(|_: ()| async {
        Err::<(), _>(std::io::Error::other("bad gateway"))
    }));
    for _ in 0..3 {
        let _ = chat_svc.ready().await.unwrap().call(()).await;
        let _ = search_svc.ready().await.unwrap().call(()).await;
    }
    assert_eq!(chat.state(), State::Open, "the failures were counted");

    // Admin JSON, over TCP.
    let admin = Admin::builder()
        .breakers([chat.clone(), search.clone()])
        .bearer_token(TOKEN)
        .allow_mutations(true)
        .build()
        .unwrap();
    let server = AdminServer::start(admin).await;
    let right = Some("Bearer s3cret-operator-token");
    let mut admin_json = String::new();
    for path in [
        "/",
        "/breakers",
        "/breakers/chat",
        "/breakers/search",
        "/health",
    ] {
        admin_json += &send(Method::GET, &server.url(path), right, "").await.text;
    }
    admin_json += &send(
        Method::POST,
        &server.url("/breakers/chat/force_open"),
        right,
        "",
    )
    .await
    .text;
    assert_no_secret("admin JSON", &admin_json);
    // The messages are there, with what is not secret kept.
    assert!(
        admin_json.contains("http://[redacted]@127.0.0.1:9/v1/chat/completions?[redacted]"),
        "{admin_json}"
    );
    assert!(
        admin_json.contains("https://[redacted]@search.example/api?[redacted]"),
        "{admin_json}"
    );

    // Snapshot JSON (serde).
    for handle in [&chat, &search] {
        let json = serde_json::to_string(&handle.snapshot()).unwrap();
        assert_no_secret("snapshot JSON", &json);
        assert!(json.contains("[redacted]"), "{json}");
        let message = handle.snapshot().last_failure.unwrap().message;
        assert_no_secret("the last failure's message", &message);
    }

    // The expediter's report, as text and as JSON.
    let expediter = Expediter::builder()
        .tool(
            ToolSpec::new("Fetch")
                .provides("web pages")
                .fallback("paste the page"),
        )
        .build()
        .unwrap();
    let mut fetch = expediter
        .layer("Fetch")
        .unwrap()
        .layer(service_fn(|_: ()| async {
            Err::<(), _>(std::io::Error::other(LEAKY))
        }));
    for _ in 0..3 {
        if expediter
            .default_run()
            .decide("Fetch")
            .await
            .unwrap()
            .should_call()
        {
            let _ = fetch.ready().await.unwrap().call(()).await;
        }
    }
    // A sub-task failed by the application with the transport error's text.
    expediter
        .default_run()
        .plan([SubTask::new("Fetch the page", ["Fetch"])])
        .unwrap();
    expediter
        .default_run()
        .fail_subtask("Fetch the page", LEAKY)
        .unwrap();
    let report = expediter.report();
    let text = report.to_string();
    assert!(text.contains("FAILED — error sending request"), "{text}");
    assert_no_secret("the report", &text);
    assert!(
        text.contains("[redacted]"),
        "the failure is reported: {text}"
    );
    assert_no_secret(
        "the report's JSON",
        &serde_json::to_string(&report).unwrap(),
    );

    // Tracing: the crate's own events and the application's observer.
    let logged = captured.0.lock().unwrap().clone();
    assert!(
        logged.contains("app:") && logged.contains("[redacted]"),
        "{logged}"
    );
    assert!(logged.contains("tower_circuit_breaker"), "{logged}");
    assert_no_secret("tracing output", &logged);

    // Metric labels.
    let series = snapshotter.snapshot().into_vec();
    assert!(!series.is_empty());
    let mut labels = String::new();
    for (key, ..) in &series {
        for label in key.key().labels() {
            let _ = write!(labels, "{}={} ", label.key(), label.value());
        }
    }
    assert!(labels.contains("breaker=chat"), "{labels}");
    assert_no_secret("metric labels", &labels);
}
