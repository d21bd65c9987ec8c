//! The admin service (feature `admin`), mounted in a hyper server on loopback and
//! called over real TCP: breakers and kill switches listed and shown as JSON, a
//! person's acts, mutations refused unless enabled, and a 4xx JSON error for every bad
//! request, never a panic (also for arbitrary requests, in process).
#![cfg(feature = "admin")]

use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody};
use proptest::prelude::*;
use serde_json::{json, Value};
use tower::ServiceExt;
use tower_circuit_breaker::admin::{Admin, AdminError};
use tower_circuit_breaker::{CircuitBreakerHandle, CircuitBreakerLayer, KillSwitch, State};

#[path = "common/admin_server.rs"]
mod admin_server;
use admin_server::AdminServer;

/// A request over TCP, bounded; the status and the JSON body.
async fn send(method: Method, url: &str, body: &str) -> (StatusCode, Value) {
    let request = reqwest::Client::new()
        .request(method, url)
        .body(body.to_string());
    let response = tokio::time::timeout(Duration::from_secs(5), request.send())
        .await
        .expect("within its bound")
        .expect("an answer");
    let status = response.status();
    assert_eq!(response.headers()["content-type"], "application/json");
    let json = response.json().await.expect("a JSON body");
    (status, json)
}

/// Two breakers obeying one kill switch, and one with a kill switch of its own.
fn breakers() -> (KillSwitch, CircuitBreakerHandle, CircuitBreakerHandle) {
    let all = KillSwitch::new();
    let chat = CircuitBreakerLayer::builder()
        .name("chat")
        .kill_switch(all.clone())
        .build()
        .unwrap()
        .handle();
    let embed = CircuitBreakerLayer::builder()
        .name("embed model")
        .kill_switch(all.clone())
        .build()
        .unwrap()
        .handle();
    (all, chat, embed)
}

fn admin(
    all: &KillSwitch,
    chat: &CircuitBreakerHandle,
    embed: &CircuitBreakerHandle,
    mutations: bool,
) -> Admin {
    Admin::builder()
        .breaker(chat.clone())
        .breaker(embed.clone())
        .kill_switch("all-models", all.clone())
        .open_to_anyone()
        .allow_mutations(mutations)
        .build()
        .unwrap()
}

#[tokio::test]
async fn the_admin_lists_and_shows_breakers_and_kill_switches_as_json_over_tcp() {
    let (all, chat, embed) = breakers();
    chat.open_for(Duration::from_secs(60));
    let server = AdminServer::start(admin(&all, &chat, &embed, false)).await;

    let (status, index) = send(Method::GET, &server.url("/"), "").await;
    assert_eq!(status, StatusCode::OK);
    let names: Vec<&str> = index["breakers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["chat", "embed model"]);
    assert_eq!(
        index["kill_switches"],
        json!([{ "name": "all-models", "killed": false, "breakers": ["chat", "embed model"] }])
    );

    let (status, chat_json) = send(Method::GET, &server.url("/breakers/chat"), "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(chat_json["state"], "forced_open");
    let wait = chat_json["retry_after_ms"].as_u64().unwrap();
    assert!(wait <= 60_000 && wait > 55_000, "{wait}");
    assert_eq!(chat_json["next_probe"]["kind"], "after");
    for field in [
        "mode",
        "killed",
        "consecutive_failures",
        "window",
        "counts",
        "generation",
    ] {
        assert!(chat_json.get(field).is_some(), "{field}");
    }

    let (_, embed_json) = send(Method::GET, &server.url("/breakers/embed%20model/"), "").await;
    assert_eq!(embed_json["state"], "closed");
    let (_, list) = send(Method::GET, &server.url("/breakers"), "").await;
    assert_eq!(list["breakers"].as_array().unwrap().len(), 2);
    let (_, kill) = send(Method::GET, &server.url("/kill_switches/all-models"), "").await;
    assert_eq!(kill["killed"], false);
}

#[tokio::test]
async fn mutations_are_refused_unless_enabled() {
    let (all, chat, embed) = breakers();
    let server = AdminServer::start(admin(&all, &chat, &embed, false)).await;
    for path in [
        "/breakers/chat/kill",
        "/breakers/chat/force_open",
        "/breakers/chat/reset",
        "/kill_switches/all-models/kill",
    ] {
        let (status, error) = send(Method::POST, &server.url(path), "").await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}");
        assert_eq!(error["error"]["code"], "mutations_disabled");
    }
    let (status, _) = send(
        Method::POST,
        &server.url("/breakers/chat/open_for"),
        r#"{"seconds": 5}"#,
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(!all.is_killed());
    assert_eq!(chat.state(), State::Closed);
}

#[tokio::test]
async fn kill_revive_force_open_open_for_and_reset_act_through_the_handles_over_tcp() {
    let (all, chat, embed) = breakers();
    let server = AdminServer::start(admin(&all, &chat, &embed, true)).await;

    // Killing a breaker flips the kill switch it obeys: the other one is killed too.
    let (status, after) = send(Method::POST, &server.url("/breakers/chat/kill"), "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(after["killed"], true);
    assert!(all.is_killed());
    assert!(embed.snapshot().killed);
    let (_, kill) = send(Method::GET, &server.url("/kill_switches"), "").await;
    assert_eq!(kill["kill_switches"][0]["killed"], true);
    let (_, revived) = send(
        Method::POST,
        &server.url("/kill_switches/all-models/revive"),
        "",
    )
    .await;
    assert_eq!(revived["killed"], false);
    assert!(!all.is_killed());

    let (_, forced) = send(Method::POST, &server.url("/breakers/chat/force_open"), "").await;
    assert_eq!(forced["state"], "forced_open");
    assert_eq!(forced["next_probe"], json!({ "kind": "manual" }));
    assert_eq!(chat.state(), State::ForcedOpen);

    let (status, held) = send(
        Method::POST,
        &server.url("/breakers/embed%20model/open_for"),
        r#"{"duration_ms": 30000}"#,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(held["state"], "forced_open");
    let wait = held["retry_after_ms"].as_u64().unwrap();
    assert!(wait <= 30_000 && wait > 25_000, "{wait}");
    assert!(embed.snapshot().retry_after().unwrap() <= Duration::from_secs(30));

    for name in ["chat", "embed%20model"] {
        let (_, reset) = send(
            Method::POST,
            &server.url(&format!("/breakers/{name}/reset")),
            "",
        )
        .await;
        assert_eq!(reset["state"], "closed");
    }
    assert_eq!(
        (chat.state(), embed.state()),
        (State::Closed, State::Closed)
    );
}

#[tokio::test]
async fn bad_paths_methods_and_bodies_get_a_4xx_json_error_over_tcp() {
    let (all, chat, embed) = breakers();
    let server = AdminServer::start(admin(&all, &chat, &embed, true)).await;
    let cases: &[(Method, &str, &str, u16, &str)] = &[
        (Method::GET, "/nope", "", 404, "not_found"),
        (Method::GET, "/breakers/chat/state", "", 404, "not_found"),
        (Method::GET, "/breakers/unknown", "", 404, "unknown_breaker"),
        (
            Method::POST,
            "/breakers/unknown/reset",
            "",
            404,
            "unknown_breaker",
        ),
        (
            Method::GET,
            "/kill_switches/nope",
            "",
            404,
            "unknown_kill_switch",
        ),
        (
            Method::POST,
            "/kill_switches/all-models/reset",
            "",
            404,
            "not_found",
        ),
        (Method::GET, "/breakers/%zz", "", 400, "bad_request"),
        (
            Method::DELETE,
            "/breakers/chat",
            "",
            405,
            "method_not_allowed",
        ),
        (
            Method::GET,
            "/breakers/chat/reset",
            "",
            405,
            "method_not_allowed",
        ),
        (Method::PUT, "/", "", 405, "method_not_allowed"),
        (
            Method::POST,
            "/breakers/chat/open_for",
            "",
            400,
            "bad_request",
        ),
        (
            Method::POST,
            "/breakers/chat/open_for",
            "soon",
            400,
            "bad_request",
        ),
        (
            Method::POST,
            "/breakers/chat/open_for",
            r#"{"seconds": -3}"#,
            400,
            "bad_request",
        ),
        (
            Method::POST,
            "/breakers/chat/open_for",
            r#"{"seconds": 1e999}"#,
            400,
            "bad_request",
        ),
        (
            Method::POST,
            "/breakers/chat/open_for",
            r#"{"hours": 1}"#,
            400,
            "bad_request",
        ),
    ];
    for (method, path, body, status, code) in cases {
        let (got, error) = send(method.clone(), &server.url(path), body).await;
        assert_eq!(got.as_u16(), *status, "{method} {path} {body}");
        assert_eq!(error["error"]["code"], *code, "{method} {path} {body}");
        assert!(error["error"]["message"].is_string());
    }
    // A `405` names the methods that would do: a read path answers HEAD as it does GET.
    let response = reqwest::Client::new()
        .delete(server.url("/breakers/chat"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["allow"], "GET, HEAD");

    // A body past 4 KiB: refused, whether its length is announced or streamed.
    let big = format!(r#"{{"seconds": 1, "pad": "{}"}}"#, "x".repeat(5000));
    let (status, error) = send(Method::POST, &server.url("/breakers/chat/open_for"), &big).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(error["error"]["code"], "body_too_large");
    let chunks = futures::stream::iter(
        (0..10).map(|_| Ok::<_, std::io::Error>(Bytes::from(vec![b' '; 1000]))),
    );
    let response = reqwest::Client::new()
        .post(server.url("/breakers/chat/open_for"))
        .body(reqwest::Body::wrap_stream(chunks))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    // None of it acted.
    assert_eq!(chat.state(), State::Closed);

    // And the server is still up.
    let (status, _) = send(Method::GET, &server.url("/"), "").await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn a_prefix_serves_only_below_it_and_a_body_that_breaks_off_is_a_bad_request() {
    let (all, chat, embed) = breakers();
    let admin = Admin::builder()
        .breakers([chat.clone(), embed.clone()])
        .kill_switch("all-models", all.clone())
        .open_to_anyone()
        .allow_mutations(true)
        .prefix("/admin/circuit-breakers")
        .build()
        .unwrap();
    let get = |path: &str| Request::get(path).body(Full::<Bytes>::default()).unwrap();
    let status = |response: http::Response<_>| response.status();
    assert_eq!(
        status(
            admin
                .clone()
                .oneshot(get("/admin/circuit-breakers"))
                .await
                .unwrap()
        ),
        200
    );
    assert_eq!(
        status(
            admin
                .clone()
                .oneshot(get("/admin/circuit-breakers/breakers/chat"))
                .await
                .unwrap()
        ),
        200
    );
    assert_eq!(
        status(admin.clone().oneshot(get("/breakers/chat")).await.unwrap()),
        404
    );
    assert_eq!(
        status(
            admin
                .clone()
                .oneshot(get("/admin/circuit-breakersx"))
                .await
                .unwrap()
        ),
        404
    );

    let broken = futures::stream::iter([
        Ok(hyper::body::Frame::data(Bytes::from_static(
            b"{\"seconds\"",
        ))),
        Err(std::io::Error::other("connection reset")),
    ]);
    let request = Request::post("/admin/circuit-breakers/breakers/chat/open_for")
        .body(StreamBody::new(broken))
        .unwrap();
    let response = admin.oneshot(request).await.unwrap();
    assert_eq!(response.status(), 400);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let error: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(error["error"]["message"], "the request body broke off");
    assert_eq!(chat.state(), State::Closed);
}

#[test]
fn the_builder_rejects_what_no_path_could_reach() {
    let (all, chat, _) = breakers();
    let twin = CircuitBreakerLayer::builder()
        .name("chat")
        .build()
        .unwrap()
        .handle();
    assert_eq!(
        Admin::builder()
            .breaker(chat.clone())
            .breaker(twin)
            .build()
            .unwrap_err(),
        AdminError::DuplicateBreaker("chat".into())
    );
    assert_eq!(
        Admin::builder()
            .kill_switch("all", all.clone())
            .kill_switch("all", KillSwitch::new())
            .build()
            .unwrap_err(),
        AdminError::DuplicateKillSwitch("all".into())
    );
    assert_eq!(
        Admin::builder().kill_switch("", all).build().unwrap_err(),
        AdminError::EmptyName
    );
    for prefix in [
        "admin", "/admin/", "/ad min", "/é", "/a?b", "/a#b", "//a", "/a%2", "/a%zz", "/a<b",
    ] {
        let error = Admin::builder().prefix(prefix).build().unwrap_err();
        assert_eq!(error, AdminError::BadPrefix(prefix.into()));
        assert!(error.to_string().starts_with("the prefix must"));
    }
    let admin = Admin::builder().open_to_anyone().build().unwrap();
    assert!(!admin.allows_mutations());
    // An escape, as a path holds it, is a prefix a path can start with.
    assert!(Admin::builder()
        .prefix("/ops%20admin")
        .open_to_anyone()
        .build()
        .is_ok());
}

#[test]
fn the_builder_refuses_no_guard_two_guards_and_a_bad_token() {
    let (_, chat, _) = breakers();
    let error = Admin::builder().breaker(chat.clone()).build().unwrap_err();
    assert_eq!(error, AdminError::NoGuard);
    assert!(error.to_string().contains("open_to_anyone"), "{error}");
    assert_eq!(
        Admin::builder()
            .bearer_token("t0ken")
            .open_to_anyone()
            .build()
            .unwrap_err(),
        AdminError::TwoGuards("bearer_token", "open_to_anyone")
    );
    for token in ["", "two words", "tab\t", "caf\u{e9}"] {
        assert_eq!(
            Admin::builder().bearer_token(token).build().unwrap_err(),
            AdminError::BadToken,
            "{token:?}"
        );
    }
    let admin = Admin::builder().bearer_token("t0ken").build().unwrap();
    assert!(
        !format!("{admin:?}").contains("t0ken"),
        "the token is never shown"
    );
    assert!(format!("{admin:?}").contains("bearer token"));
}

fn method() -> impl Strategy<Value = Method> {
    prop_oneof![
        Just(Method::GET),
        Just(Method::POST),
        Just(Method::PUT),
        Just(Method::DELETE),
        Just(Method::HEAD),
        Just(Method::OPTIONS),
        Just(Method::PATCH),
    ]
}

fn path() -> impl Strategy<Value = String> {
    let segment = prop_oneof![
        Just("breakers".to_string()),
        Just("kill_switches".to_string()),
        Just("chat".to_string()),
        Just("embed%20model".to_string()),
        Just("all-models".to_string()),
        Just("kill".to_string()),
        Just("revive".to_string()),
        Just("force_open".to_string()),
        Just("open_for".to_string()),
        Just("reset".to_string()),
        Just(String::new()),
        "[%a-zA-Z0-9_.~-]{0,6}",
    ];
    proptest::collection::vec(segment, 0..5).prop_map(|segments| format!("/{}", segments.join("/")))
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(br#"{"seconds": 1}"#.to_vec()),
        Just(br#"{"duration_ms": 1}"#.to_vec()),
        Just(br#"{"seconds": 1e308}"#.to_vec()),
        Just(br#"{"duration_ms": 18446744073709551615}"#.to_vec()),
        proptest::collection::vec(any::<u8>(), 0..64),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever the method, path and body: an answer, never a panic; a 2xx or a 4xx;
    /// every 4xx a JSON error with a code (and every answer to HEAD without a body).
    #[test]
    fn any_request_gets_an_answer_and_every_error_is_a_4xx_json_error(
        method in method(),
        path in path(),
        body in body(),
        mutations in any::<bool>(),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let (all, chat, embed) = breakers();
        let admin = admin(&all, &chat, &embed, mutations);
        let head = method == Method::HEAD;
        let Ok(request) = Request::builder().method(method).uri(&path).body(Full::new(Bytes::from(body))) else {
            return Ok(()); // not a request hyper would hand over
        };
        let response = runtime.block_on(admin.oneshot(request)).unwrap();
        let status = response.status();
        prop_assert!(status.is_success() || status.is_client_error(), "{status} for {path}");
        let bytes = runtime.block_on(response.into_body().collect()).unwrap().to_bytes();
        if head {
            prop_assert!(bytes.is_empty(), "HEAD {path}: a body");
            return Ok(());
        }
        let json: Value = serde_json::from_slice(&bytes).expect("a JSON body");
        if status.is_client_error() {
            prop_assert!(json["error"]["code"].is_string(), "{json}");
        }
    }
}

#[test]
fn the_admin_service_can_be_shared_across_threads_as_hyper_and_axum_need() {
    fn send_sync_clone<T: Send + Sync + Clone + 'static>() {}
    fn send<T: Send>() {}
    send_sync_clone::<Admin>();
    send_sync_clone::<tower_circuit_breaker::admin::AdminBuilder>();
    send_sync_clone::<tower_circuit_breaker::admin::HealthRule>();
    send::<tower_circuit_breaker::admin::AdminFuture<hyper::body::Incoming>>();
    send::<tower_circuit_breaker::admin::AdminBody>();
}

#[tokio::test]
async fn an_open_for_too_long_naming_a_field_twice_or_not_an_object_is_refused() {
    let (all, chat, embed) = breakers();
    let server = AdminServer::start(admin(&all, &chat, &embed, true)).await;
    for body in [
        r#"{"seconds": 1e18}"#,
        r#"{"seconds": 3153600001}"#,
        r#"{"duration_ms": 18446744073709551615}"#,
        r#"{"seconds": 30, "seconds": 1}"#,
        r#"{"duration_ms": 30000, "duration_ms": 1}"#,
        r#"{"seconds": 30, "duration_ms": 1}"#,
        r#"{"seconds": 30, "duration_ms": null}"#,
        r#"[30, null]"#,
        "null",
    ] {
        let (status, error) =
            send(Method::POST, &server.url("/breakers/chat/open_for"), body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(error["error"]["code"], "bad_request", "{body}");
    }
    assert_eq!(chat.state(), State::Closed, "nothing acted");
    // A century is the longest.
    let (status, _) = send(
        Method::POST,
        &server.url("/breakers/chat/open_for"),
        r#"{"seconds": 3153600000}"#,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn a_duration_ms_that_is_not_an_integer_is_refused_as_such_not_as_out_of_range() {
    let (all, chat, embed) = breakers();
    let server = AdminServer::start(admin(&all, &chat, &embed, true)).await;
    for (body, said) in [
        (r#"{"duration_ms": 1000.0}"#, "written as an integer"),
        (r#"{"duration_ms": 1e3}"#, "written as an integer"),
        (r#"{"duration_ms": 1.5}"#, "whole number of milliseconds"),
        (r#"{"duration_ms": 0}"#, "more than zero"),
        (r#"{"duration_ms": 18446744073709551616}"#, "more than zero"),
    ] {
        let (status, error) =
            send(Method::POST, &server.url("/breakers/chat/open_for"), body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        let message = error["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(said), "{body}: {error}");
    }
    assert_eq!(chat.state(), State::Closed, "nothing acted");
}

#[tokio::test(start_paused = true)]
async fn a_body_that_stops_coming_is_answered_408_after_ten_seconds() {
    let (all, chat, embed) = breakers();
    let admin = admin(&all, &chat, &embed, true);
    // A client that sends part of a body and stops, its connection left open.
    let part = futures::stream::iter([Ok::<_, std::io::Error>(http_body::Frame::data(
        Bytes::from_static(b"{\"sec"),
    ))]);
    let body = StreamBody::new(futures::StreamExt::chain(part, futures::stream::pending()));
    let request = Request::post("/breakers/chat/open_for").body(body).unwrap();
    let started = tokio::time::Instant::now();
    let response = admin.oneshot(request).await.unwrap();
    assert_eq!(started.elapsed(), Duration::from_secs(10));
    assert_eq!(response.status(), StatusCode::REQUEST_TIMEOUT);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let error: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(error["error"]["code"], "body_timed_out");
    assert_eq!(chat.state(), State::Closed, "nothing acted");
}

#[tokio::test]
async fn an_open_for_too_short_for_the_clock_is_refused_not_an_opening_for_no_time() {
    let (all, chat, embed) = breakers();
    let server = AdminServer::start(admin(&all, &chat, &embed, true)).await;
    // More than zero as a number, nothing once a duration (under a nanosecond).
    for body in [r#"{"seconds": 1e-10}"#, r#"{"seconds": 5e-324}"#] {
        let (status, error) =
            send(Method::POST, &server.url("/breakers/chat/open_for"), body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(error["error"]["code"], "bad_request", "{body}");
    }
    assert_eq!(chat.state(), State::Closed, "nothing acted");
    // A nanosecond is a duration.
    let (status, _) = send(
        Method::POST,
        &server.url("/breakers/chat/open_for"),
        r#"{"seconds": 1e-9}"#,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
}
