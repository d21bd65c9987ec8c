//! Streamed answers (feature `http`): a body that breaks or ends early is a failure when
//! the stream ends; a success is recorded only when it does.
#![cfg(feature = "http")]

use std::convert::Infallible;
use std::io;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::stream;
use http::{Request, Response};
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody as ChunkBody};
use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
use tower_circuit_breaker::error::BoxError;
use tower_circuit_breaker::http::{StreamBody, StreamBodyLayer, StreamClassifier};
use tower_circuit_breaker::{
    Answer, CircuitBreakerHandle, CircuitBreakerLayer, Cooldown, Source, State, Verdict,
};

type Chunks = ChunkBody<stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, io::Error>>>>;

/// What the scripted model answers: a status and the pieces of its body, each a chunk or
/// an error; with `length`, a `Content-Length` header.
#[derive(Clone)]
struct Script {
    status: u16,
    pieces: Vec<Result<&'static str, &'static str>>,
    length: Option<usize>,
}

fn ok(pieces: &[&'static str]) -> Script {
    Script {
        status: 200,
        pieces: pieces.iter().map(|p| Ok(*p)).collect(),
        length: None,
    }
}

fn respond(script: Script) -> Response<Chunks> {
    let frames: Vec<Result<Frame<Bytes>, io::Error>> = script
        .pieces
        .into_iter()
        .map(|piece| match piece {
            Ok(text) => Ok(Frame::data(Bytes::from(text))),
            Err(message) => Err(io::Error::new(io::ErrorKind::ConnectionReset, message)),
        })
        .collect();
    let mut response = Response::builder().status(script.status);
    if let Some(length) = script.length {
        response = response.header(http::header::CONTENT_LENGTH, length);
    }
    response
        .body(ChunkBody::new(stream::iter(frames)))
        .expect("valid response")
}

type Model = tower::util::BoxService<Request<()>, Answer<Response<StreamBody<Chunks>>>, BoxError>;

/// A breaker (threshold 2, cooldown 1 call) over a model that answers the scripts in
/// turn, with bodies wrapped for settling at the end of the stream.
fn model(scripts: Vec<Script>, marker: Option<&'static [u8]>) -> (Model, CircuitBreakerHandle) {
    let breaker = CircuitBreakerLayer::builder()
        .name("model")
        .failure_threshold(2)
        .cooldown(Cooldown::Calls(1))
        .build()
        .expect("valid");
    let handle = breaker.handle();
    let queue = Arc::new(Mutex::new(scripts.into_iter()));
    let service = ServiceBuilder::new()
        .layer(breaker.with_classifier(StreamClassifier::default()))
        .layer(bodies(marker))
        .service(service_fn(move |_: Request<()>| {
            let script = queue.lock().unwrap().next().expect("a scripted answer");
            async move { Ok::<_, Infallible>(respond(script)) }
        }));
    (tower::util::BoxService::new(service), handle)
}

/// The layer that wraps bodies, waiting for `marker` if there is one.
fn bodies(marker: Option<&'static [u8]>) -> StreamBodyLayer {
    match marker {
        Some(marker) => StreamBodyLayer::new().end_marker(marker),
        None => StreamBodyLayer::new(),
    }
}

async fn call(model: &mut Model) -> Answer<Response<StreamBody<Chunks>>> {
    model
        .ready()
        .await
        .unwrap()
        .call(Request::new(()))
        .await
        .expect("an answer")
}

/// Reads the whole body; `Err` if the stream broke.
async fn read(answer: Answer<Response<StreamBody<Chunks>>>) -> Result<Bytes, io::Error> {
    Ok(answer.into_inner().into_body().collect().await?.to_bytes())
}

#[tokio::test(start_paused = true)]
async fn a_success_is_recorded_when_the_stream_ends_not_when_the_headers_arrive() {
    let (mut model, handle) = model(vec![ok(&["hel", "lo"])], None);
    let answer = call(&mut model).await;
    assert_eq!(answer.source(), Source::Service);
    // A call in the closed state is counted when it ends: a stream still running is
    // neither made nor a success yet.
    let counts = handle.snapshot().counts;
    assert_eq!((counts.made, counts.successes), (0, 0), "still streaming");
    assert_eq!(read(answer).await.unwrap(), "hello");
    let counts = handle.snapshot().counts;
    assert_eq!((counts.made, counts.successes), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn a_stream_that_breaks_counts_as_a_failure_and_two_open_the_breaker() {
    let broken = Script {
        status: 200,
        pieces: vec![Ok("partial answer"), Err("connection reset by peer")],
        length: None,
    };
    let (mut model, handle) = model(vec![broken.clone(), broken], None);
    for _ in 0..2 {
        let answer = call(&mut model).await;
        assert!(read(answer).await.is_err(), "the caller sees the break");
    }
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::Open);
    assert_eq!(snapshot.counts.failures, 2);
    let failure = snapshot.last_failure.expect("a failure");
    assert!(
        failure.message.contains("stream broke"),
        "{}",
        failure.message
    );
    assert!(
        failure.message.contains("connection reset"),
        "{}",
        failure.message
    );
}

#[tokio::test(start_paused = true)]
async fn a_body_shorter_than_its_content_length_is_a_failure() {
    let short = Script {
        status: 200,
        pieces: vec![Ok("12345")],
        length: Some(10),
    };
    let (mut model, handle) = model(vec![short], None);
    let answer = call(&mut model).await;
    // The body ends cleanly from the caller's side; the breaker knows better.
    assert_eq!(read(answer).await.unwrap(), "12345");
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.counts.failures, 1);
    assert!(snapshot
        .last_failure
        .unwrap()
        .message
        .contains("5 of 10 bytes"));
}

#[tokio::test(start_paused = true)]
async fn an_event_stream_must_reach_its_end_marker_even_split_across_chunks() {
    let complete = ok(&["data: a\n\n", "data: [DO", "NE]\n\n"]);
    let cut = ok(&["data: a\n\n", "data: b\n\n"]);
    let (mut model, handle) = model(vec![complete, cut], Some(b"data: [DONE]"));
    read(call(&mut model).await).await.unwrap();
    assert_eq!(handle.snapshot().counts.successes, 1);
    read(call(&mut model).await).await.unwrap();
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.counts.failures, 1);
    assert!(snapshot
        .last_failure
        .unwrap()
        .message
        .contains("end marker"));
}

/// An event-stream client stops reading at `data: [DONE]` and drops the body: its
/// call is a success (the answer was whole), so a probe that does so closes the breaker.
#[tokio::test(start_paused = true)]
async fn a_caller_that_stops_reading_at_the_end_marker_has_had_a_success() {
    let broken = Script {
        status: 200,
        pieces: vec![Err("reset")],
        length: None,
    };
    let answer = ok(&["data: a\n\n", "data: [DONE]\n\n", ": trailing comment\n\n"]);
    let (mut model, handle) = model(
        vec![answer.clone(), broken.clone(), broken, answer],
        Some(b"data: [DONE]"),
    );
    async fn read_to_marker(answer: Answer<Response<StreamBody<Chunks>>>) {
        let mut body = answer.into_inner().into_body();
        while let Some(frame) = body.frame().await {
            let data = frame.expect("data").into_data().unwrap();
            if data.ends_with(b"[DONE]\n\n") {
                return; // the body is dropped here, unread to its end
            }
        }
        panic!("no end marker");
    }
    read_to_marker(call(&mut model).await).await;
    let counts = handle.snapshot().counts;
    assert_eq!((counts.successes, counts.cancelled), (1, 0));

    for _ in 0..2 {
        let _ = read(call(&mut model).await).await;
    }
    assert_eq!(handle.state(), State::Open);
    let probe = call(&mut model).await;
    assert_eq!(probe.source(), Source::Probe);
    read_to_marker(probe).await;
    assert_eq!(
        handle.state(),
        State::Closed,
        "the probe's success closed it"
    );
}

/// A 304 (or 204) has no body whatever its headers say: its `Content-Length` and the end
/// marker are not asked of it.
#[tokio::test(start_paused = true)]
async fn a_status_without_a_body_is_not_held_to_its_length_or_the_end_marker() {
    let not_modified = Script {
        status: 304,
        pieces: vec![],
        length: Some(1_234),
    };
    let (mut model, handle) = model(vec![not_modified], Some(b"data: [DONE]"));
    read(call(&mut model).await).await.unwrap();
    let counts = handle.snapshot().counts;
    assert_eq!((counts.successes, counts.failures), (1, 0));
}

#[tokio::test(start_paused = true)]
async fn a_body_dropped_before_its_end_is_cancelled_not_counted() {
    let (mut model, handle) = model(vec![ok(&["a", "b", "c"])], None);
    let answer = call(&mut model).await;
    let mut body = answer.into_inner().into_body();
    let first = body.frame().await.expect("a frame").expect("data");
    assert_eq!(first.into_data().unwrap(), "a");
    drop(body);
    let counts = handle.snapshot().counts;
    assert_eq!(
        (counts.successes, counts.failures, counts.cancelled),
        (0, 0, 1)
    );
}

#[tokio::test(start_paused = true)]
async fn a_streaming_probe_holds_its_slot_until_its_stream_ends() {
    let broken = Script {
        status: 200,
        pieces: vec![Err("reset")],
        length: None,
    };
    let (mut model, handle) = model(
        vec![broken.clone(), broken, ok(&["back"]), ok(&["again"])],
        None,
    );
    for _ in 0..2 {
        let _ = read(call(&mut model).await).await;
    }
    assert_eq!(handle.state(), State::Open);
    // The cooldown is one call: this call is the probe.
    let probe = call(&mut model).await;
    assert_eq!(probe.source(), Source::Probe);
    let snapshot = handle.snapshot();
    assert_eq!(
        (snapshot.state, snapshot.probes_in_flight),
        (State::HalfOpen, 1)
    );
    // Meanwhile, another caller meets the probe under way, before any byte: the only
    // time a fallback (here the typed error) ever answers instead.
    let err = model
        .ready()
        .await
        .unwrap()
        .call(Request::new(()))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("a probe is under way"), "{err}");
    assert_eq!(read(probe).await.unwrap(), "back");
    let snapshot = handle.snapshot();
    assert_eq!(
        (snapshot.state, snapshot.probes_in_flight),
        (State::Closed, 0)
    );
    assert_eq!(read(call(&mut model).await).await.unwrap(), "again");
}

#[tokio::test(start_paused = true)]
async fn an_error_status_fails_at_once_without_waiting_for_the_body() {
    let overloaded = Script {
        status: 503,
        pieces: vec![Ok("overloaded")],
        length: None,
    };
    let (mut model, handle) = model(vec![overloaded], None);
    let answer = call(&mut model).await;
    assert_eq!(
        handle.snapshot().counts.failures,
        1,
        "decided on the headers"
    );
    assert_eq!(read(answer).await.unwrap(), "overloaded");
    assert_eq!(
        handle.snapshot().counts.failures,
        1,
        "and not again at the end"
    );
}

type EmptyAnswer = Answer<Response<StreamBody<http_body_util::Empty<Bytes>>>>;
type EmptyModel = tower::util::BoxService<Request<()>, EmptyAnswer, BoxError>;

/// A breaker (threshold 2) over a model that answers every request with `status`, a
/// `Content-Length` of `length` if any, and a body with nothing in it that says so
/// (`is_end_stream`), as hyper's does for a 204, a `Content-Length: 0` or a HEAD.
fn empty_answers(
    status: u16,
    length: Option<u64>,
    marker: Option<&'static [u8]>,
) -> (EmptyModel, CircuitBreakerHandle) {
    let breaker = CircuitBreakerLayer::builder()
        .name("empty")
        .failure_threshold(2)
        .build()
        .expect("valid");
    let handle = breaker.handle();
    let service = ServiceBuilder::new()
        .layer(breaker.with_classifier(StreamClassifier::default()))
        .layer(bodies(marker))
        .service(service_fn(move |_: Request<()>| async move {
            let mut response = Response::builder().status(status);
            if let Some(length) = length {
                response = response.header(http::header::CONTENT_LENGTH, length);
            }
            Ok::<_, Infallible>(response.body(http_body_util::Empty::new()).unwrap())
        }));
    (tower::util::BoxService::new(service), handle)
}

async fn ask(model: &mut EmptyModel, request: Request<()>) -> EmptyAnswer {
    let model = model.ready().await.unwrap();
    model.call(request).await.expect("an answer")
}

/// What the breaker counted of the calls so far, and its last failure's message.
#[derive(Debug, PartialEq, Eq)]
struct Counted {
    successes: u64,
    failures: u64,
    cancelled: u64,
    message: Option<String>,
}

fn counted(handle: &CircuitBreakerHandle) -> Counted {
    let snapshot = handle.snapshot();
    Counted {
        successes: snapshot.counts.successes,
        failures: snapshot.counts.failures,
        cancelled: snapshot.counts.cancelled,
        message: snapshot.last_failure.map(|f| f.message.to_string()),
    }
}

/// What the breaker counted after one more answer, dropped unread.
async fn dropped_unread(
    model: &mut EmptyModel,
    request: Request<()>,
    handle: &CircuitBreakerHandle,
) -> Counted {
    drop(ask(model, request).await);
    counted(handle)
}

fn successes(successes: u64) -> Counted {
    Counted {
        successes,
        failures: 0,
        cancelled: 0,
        message: None,
    }
}

/// An empty body at its end when the response arrives is whole (or cut short) then: a
/// caller that never reads it has had that outcome, not a cancelled call.
#[tokio::test(start_paused = true)]
async fn a_body_already_at_its_end_is_settled_when_the_response_arrives() {
    let (mut model, handle) = empty_answers(200, Some(0), None);
    let answer = ask(&mut model, Request::new(())).await;
    assert_eq!(counted(&handle), successes(1), "before any read");
    assert_eq!(answer.verdict(), Some(Verdict::Success));
    drop(answer);
    let after = dropped_unread(&mut model, Request::new(()), &handle).await;
    assert_eq!(after, successes(2));

    // Announced and not sent, or an end marker to wait for and nothing came: cut short,
    // at once.
    for (length, marker, why) in [
        (Some(10), None, "0 of 10 bytes"),
        (None, Some(&b"data: [DONE]"[..]), "end marker"),
    ] {
        let (mut model, handle) = empty_answers(200, length, marker);
        let after = dropped_unread(&mut model, Request::new(()), &handle).await;
        assert_eq!((after.failures, after.cancelled), (1, 0));
        assert!(after.message.unwrap().contains(why));
    }

    // A 204 owes neither.
    let (mut model, handle) = empty_answers(204, Some(10), Some(b"data: [DONE]"));
    let after = dropped_unread(&mut model, Request::new(()), &handle).await;
    assert_eq!(after, successes(1));
}

/// The answer to a HEAD request has no body whatever its `Content-Length` says (RFC
/// 9110): it is not held to it, nor to an end marker; a GET answered so is.
#[tokio::test(start_paused = true)]
async fn the_answer_to_a_head_request_owes_no_body() {
    let head = || Request::head("/").body(()).unwrap();
    let (mut model, handle) = empty_answers(200, Some(1_000), Some(b"data: [DONE]"));
    assert_eq!(
        dropped_unread(&mut model, head(), &handle).await,
        successes(1)
    );
    let answer = ask(&mut model, head()).await;
    let body = answer.into_inner().into_body().collect().await.unwrap();
    assert!(body.to_bytes().is_empty());
    assert_eq!(counted(&handle), successes(2));

    let after = dropped_unread(&mut model, Request::new(()), &handle).await;
    assert_eq!(after.failures, 1, "a GET's answer owes its length");
}

/// Frames whose data is a `Chain` of two `Bytes`: the end marker may lie in the second
/// slice, straddle the two, or straddle a slice and the next frame.
type ChainedChunks = ChunkBody<
    stream::Iter<std::vec::IntoIter<Result<Frame<bytes::buf::Chain<Bytes, Bytes>>, io::Error>>>,
>;

fn chained(frames: &[(&'static str, &'static str)]) -> Response<ChainedChunks> {
    use bytes::Buf;
    let frames: Vec<Result<Frame<bytes::buf::Chain<Bytes, Bytes>>, io::Error>> = frames
        .iter()
        .map(|(first, second)| Ok(Frame::data(Bytes::from(*first).chain(Bytes::from(*second)))))
        .collect();
    Response::new(ChunkBody::new(stream::iter(frames)))
}

#[tokio::test(start_paused = true)]
async fn an_end_marker_is_found_in_any_slice_of_a_multi_slice_frame_and_across_frames() {
    let cases: [&[(&str, &str)]; 4] = [
        // In the second slice.
        &[("data: a\n\n", "data: [DONE]\n\n")],
        // Straddling the two slices of one frame.
        &[("data: a\n\ndata: [DO", "NE]\n\n")],
        // Straddling the second slice of one frame and the first of the next.
        &[("data: a\n\n", "data: [D"), ("ONE]", "\n\n")],
        // Spread over three slices in two frames.
        &[("data: a\n\ndata:", " [DO"), ("NE", "]\n\n")],
    ];
    for frames in cases {
        let breaker = CircuitBreakerLayer::builder()
            .name("model")
            .build()
            .expect("valid");
        let handle = breaker.handle();
        let mut model = ServiceBuilder::new()
            .layer(breaker.with_classifier(StreamClassifier::default()))
            .layer(StreamBodyLayer::new().end_marker(b"data: [DONE]"))
            .service(service_fn(move |_: Request<()>| async move {
                Ok::<_, Infallible>(chained(frames))
            }));
        let answer = model
            .ready()
            .await
            .unwrap()
            .call(Request::new(()))
            .await
            .unwrap();
        answer.into_inner().into_body().collect().await.unwrap();
        let counts = handle.snapshot().counts;
        assert_eq!((counts.successes, counts.failures), (1, 0), "{frames:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_callers_4xx_error_body_is_not_held_to_the_end_marker() {
    let bad_request = Script {
        status: 400,
        pieces: vec![Ok(r#"{"error":{"code":"invalid_request_error"}}"#)],
        length: None,
    };
    let (mut model, handle) = model(
        vec![bad_request.clone(), bad_request],
        Some(b"data: [DONE]"),
    );
    for _ in 0..2 {
        let answer = call(&mut model).await;
        assert_eq!(
            answer.verdict(),
            Some(Verdict::Success),
            "the caller's mistake"
        );
        read(answer).await.unwrap();
    }
    let counts = handle.snapshot().counts;
    assert_eq!((counts.successes, counts.failures), (2, 0));
    assert_eq!(handle.state(), State::Closed);
}

#[tokio::test(start_paused = true)]
async fn the_end_marker_counts_only_at_a_lines_start_not_quoted_in_the_answer() {
    let quoting = Script {
        status: 200,
        pieces: vec![
            Ok("data: {\"content\":\"SSE streams end with data: [DONE]\"}\n\n"),
            Err("connection reset by peer"),
        ],
        length: None,
    };
    let (mut quoted, handle) = model(vec![quoting], Some(b"data: [DONE]"));
    assert!(read(call(&mut quoted).await).await.is_err());
    let counts = handle.snapshot().counts;
    assert_eq!(
        (counts.successes, counts.failures),
        (0, 1),
        "the break is counted"
    );
    // At a line's start, even split across chunks, it is the marker.
    let (mut model, handle) = model(
        vec![ok(&["data: x\n\ndata: [DO", "NE]\n\n"])],
        Some(b"data: [DONE]"),
    );
    read(call(&mut model).await).await.unwrap();
    assert_eq!(handle.snapshot().counts.successes, 1);
}
