//! An admin endpoint for operators (feature `admin`): a tower `Service` over HTTP
//! requests that shows a set of named breakers and kill switches as JSON and, when
//! enabled, lets a person act on them, as resilience4j's actuator endpoints do.
//!
//! Mount it in hyper (with `hyper_util::service::TowerToHyperService`) or in axum
//! (`Router::nest_service("/admin", admin)`); it uses the breakers' public handles and
//! nothing else, so what it does is what [`CircuitBreakerHandle`] says.
//!
//! | Method and path | Answer |
//! | --- | --- |
//! | `GET /` | `{"breakers": [snapshot, ...], "kill_switches": [kill switch, ...]}` |
//! | `GET /breakers` | `{"breakers": [snapshot, ...]}` |
//! | `GET /breakers/{name}` | the breaker's [`Snapshot`] (its JSON shape is documented there) |
//! | `POST /breakers/{name}/kill`, `.../revive` | turns the kill switch the breaker obeys on or off (shared with whatever else obeys it); the snapshot after |
//! | `POST /breakers/{name}/force_open` | [`force_open`](CircuitBreakerHandle::force_open); the snapshot after |
//! | `POST /breakers/{name}/open_for` with `{"seconds": 30}` or `{"duration_ms": 30000}` | [`open_for`](CircuitBreakerHandle::open_for); the snapshot after |
//! | `POST /breakers/{name}/reset` | [`reset`](CircuitBreakerHandle::reset); the snapshot after |
//! | `GET /kill_switches`, `GET /kill_switches/{name}` | `{"name": "all-models", "killed": false, "breakers": ["chat", ...]}` (the registered breakers that obey it) |
//! | `POST /kill_switches/{name}/kill`, `.../revive` | flips it; the kill switch after |
//!
//! Every `GET` path answers `HEAD` too, with the same status and headers and no body.
//! Names in paths are percent-decoded. Under a [`prefix`](AdminBuilder::prefix), every
//! path is below it.
//!
//! - **Mutations are off unless enabled** ([`AdminBuilder::allow_mutations`]): a `POST`
//!   then gets `403` (`mutations_disabled`). The service does no authentication: guard
//!   it (a bearer-token layer, a loopback or private listener) before enabling them.
//!   Every change is logged through `tracing` (target `tower_circuit_breaker::admin`).
//! - **Bad requests get a 4xx JSON error, never a panic**:
//!   `{"error": {"code": "...", "message": "..."}}` with `404` (`not_found`,
//!   `unknown_breaker`, `unknown_kill_switch`), `405` (`method_not_allowed`, with an
//!   `Allow` header), `400` (`bad_request`: a bad escape in the path, a body that is not
//!   the JSON asked for, a duration that is zero, negative or too long, a body that
//!   broke off) or `413` (`body_too_large`: more than 4 KiB).
//!
//! ```
//! use std::time::Duration;
//! use bytes::Bytes;
//! use http::Request;
//! use http_body_util::{BodyExt, Full};
//! use tower::ServiceExt;
//! use tower_circuit_breaker::admin::Admin;
//! use tower_circuit_breaker::{CircuitBreakerLayer, KillSwitch, State};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let all_models = KillSwitch::new();
//! let chat = CircuitBreakerLayer::builder().name("chat").kill_switch(all_models.clone()).build()?;
//! let admin = Admin::builder()
//!     .breaker(chat.handle())
//!     .kill_switch("all-models", all_models.clone())
//!     .allow_mutations(true)
//!     .build()?;
//!
//! let request = Request::post("/breakers/chat/open_for")
//!     .body(Full::new(Bytes::from_static(br#"{"seconds": 30}"#)))?;
//! let response = admin.clone().oneshot(request).await?;
//! assert_eq!(response.status(), 200);
//! let snapshot: serde_json::Value =
//!     serde_json::from_slice(&response.into_body().collect().await?.to_bytes())?;
//! assert_eq!(snapshot["state"], "forced_open");
//! assert_eq!(chat.handle().state(), State::ForcedOpen);
//!
//! let request = Request::post("/kill_switches/all-models/kill").body(Full::<Bytes>::default())?;
//! admin.clone().oneshot(request).await?;
//! assert!(all_models.is_killed());
//!
//! let request = Request::delete("/breakers/chat").body(Full::<Bytes>::default())?;
//! let response = admin.oneshot(request).await?;
//! assert_eq!(response.status(), 405);
//! # Ok(()) }
//! ```

mod reply;
mod route;

use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use ::http::{Method, Request, Response, StatusCode};
use http_body::Body;
use tower::Service;

pub use self::reply::AdminBody;
use self::reply::{head_of, json, Problem};
use self::route::{Act, Target};
use crate::handle::CircuitBreakerHandle;
use crate::http::bounded_read::{BoundedRead, Unread};
use crate::kill::KillSwitch;
use crate::snapshot::Snapshot;

/// The largest request body the admin service reads: 4 KiB.
pub const MAX_BODY: usize = 4 * 1024;

/// A set of breakers and kill switches that cannot be served as given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AdminError {
    /// Two breakers share a name: a path could not tell them apart.
    #[error("two breakers are named {0:?}")]
    DuplicateBreaker(String),
    /// Two kill switches share a name.
    #[error("two kill switches are named {0:?}")]
    DuplicateKillSwitch(String),
    /// A kill switch's name is empty: no path reaches it.
    #[error("a kill switch name must not be empty")]
    EmptyName,
    /// The prefix is not empty and does not start with `/`, or ends with one.
    #[error("the prefix must be empty or start with '/' and not end with it, got {0:?}")]
    BadPrefix(String),
}

/// Settings for an [`Admin`] service, checked by [`build`](Self::build).
#[derive(Debug, Clone, Default)]
pub struct AdminBuilder {
    breakers: Vec<CircuitBreakerHandle>,
    kill_switches: Vec<(String, KillSwitch)>,
    mutations: bool,
    prefix: String,
}

impl AdminBuilder {
    /// Serves this breaker, under its name.
    pub fn breaker(mut self, handle: CircuitBreakerHandle) -> Self {
        self.breakers.push(handle);
        self
    }

    /// Serves these breakers, each under its name.
    pub fn breakers(mut self, handles: impl IntoIterator<Item = CircuitBreakerHandle>) -> Self {
        self.breakers.extend(handles);
        self
    }

    /// Serves this kill switch under `name` (one shared by several breakers, say).
    pub fn kill_switch(mut self, name: impl Into<String>, kill: KillSwitch) -> Self {
        self.kill_switches.push((name.into(), kill));
        self
    }

    /// Whether `POST` requests may act (kill, revive, force open, open for a time,
    /// reset). Off by default: the service only reads. It does no authentication of
    /// its own; guard it before turning this on.
    pub fn allow_mutations(mut self, allow: bool) -> Self {
        self.mutations = allow;
        self
    }

    /// Serves every path below `prefix` (`/admin/circuit-breakers`), for a service
    /// mounted where the path is not stripped. Default: none.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The service.
    ///
    /// # Errors
    ///
    /// [`AdminError`]: two breakers or two kill switches with one name, an empty kill
    /// switch name, a bad prefix.
    pub fn build(self) -> Result<Admin, AdminError> {
        let prefix = &self.prefix;
        if !prefix.is_empty() && (!prefix.starts_with('/') || prefix.ends_with('/')) {
            return Err(AdminError::BadPrefix(self.prefix));
        }
        for (i, handle) in self.breakers.iter().enumerate() {
            if self.breakers[..i].iter().any(|h| h.name() == handle.name()) {
                return Err(AdminError::DuplicateBreaker(handle.name().to_string()));
            }
        }
        for (i, (name, _)) in self.kill_switches.iter().enumerate() {
            if name.is_empty() {
                return Err(AdminError::EmptyName);
            }
            if self.kill_switches[..i].iter().any(|(n, _)| n == name) {
                return Err(AdminError::DuplicateKillSwitch(name.clone()));
            }
        }
        Ok(Admin {
            inner: Arc::new(Inner {
                breakers: self.breakers,
                kill_switches: self.kill_switches,
                mutations: self.mutations,
                prefix: self.prefix,
            }),
        })
    }
}

/// The admin service; see the [module docs](self).
///
/// # Clone
///
/// Clones serve the same breakers and kill switches, with the same settings.
#[derive(Clone)]
pub struct Admin {
    inner: Arc<Inner>,
}

struct Inner {
    breakers: Vec<CircuitBreakerHandle>,
    kill_switches: Vec<(String, KillSwitch)>,
    mutations: bool,
    prefix: String,
}

#[derive(serde::Serialize)]
struct Index {
    breakers: Vec<Snapshot>,
    kill_switches: Vec<KillView>,
}

#[derive(serde::Serialize)]
struct Breakers {
    breakers: Vec<Snapshot>,
}

#[derive(serde::Serialize)]
struct KillSwitches {
    kill_switches: Vec<KillView>,
}

/// A kill switch as the admin shows it.
#[derive(serde::Serialize)]
struct KillView {
    name: String,
    killed: bool,
    /// The registered breakers that obey it.
    breakers: Vec<String>,
}

impl Admin {
    /// Settings for a service with no breaker yet, mutations off.
    pub fn builder() -> AdminBuilder {
        AdminBuilder::default()
    }

    /// Whether `POST` requests may act.
    pub fn allows_mutations(&self) -> bool {
        self.inner.mutations
    }
}

impl Inner {
    fn breaker(&self, name: &str) -> Result<&CircuitBreakerHandle, Problem> {
        self.breakers
            .iter()
            .find(|handle| handle.name() == name)
            .ok_or_else(|| Problem::unknown("breaker", name))
    }

    fn kill_switch(&self, name: &str) -> Result<&KillSwitch, Problem> {
        self.kill_switches
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, kill)| kill)
            .ok_or_else(|| Problem::unknown("kill switch", name))
    }

    fn snapshots(&self) -> Vec<Snapshot> {
        self.breakers
            .iter()
            .map(CircuitBreakerHandle::snapshot)
            .collect()
    }

    fn kill_view(&self, name: &str, kill: &KillSwitch) -> KillView {
        KillView {
            name: name.to_string(),
            killed: kill.is_killed(),
            breakers: self
                .breakers
                .iter()
                .filter(|handle| handle.kill_switch().same_as(kill))
                .map(|handle| handle.name().to_string())
                .collect(),
        }
    }

    fn kill_views(&self) -> Vec<KillView> {
        self.kill_switches
            .iter()
            .map(|(name, kill)| self.kill_view(name, kill))
            .collect()
    }

    /// What to do with a request: answer it now, or read its body first. HEAD is
    /// answered wherever GET is (RFC 9110 §9.1), without the body.
    fn route(&self, method: &Method, path: &str) -> Result<Next, Problem> {
        let method = if *method == Method::HEAD {
            &Method::GET
        } else {
            method
        };
        let target = Target::parse(&self.prefix, path)?;
        if *method != target.method() {
            return Err(Problem::method_not_allowed(target.method()));
        }
        if target.method() == Method::POST && !self.mutations {
            return Err(Problem::mutations_disabled());
        }
        match target {
            Target::Index => ok(&Index {
                breakers: self.snapshots(),
                kill_switches: self.kill_views(),
            }),
            Target::Breakers => ok(&Breakers {
                breakers: self.snapshots(),
            }),
            Target::Breaker(name) => ok(&self.breaker(&name)?.snapshot()),
            Target::BreakerAct(name, Act::OpenFor) => {
                Ok(Next::ReadDuration(self.breaker(&name)?.clone()))
            }
            Target::BreakerAct(name, act) => {
                let handle = self.breaker(&name)?;
                match act {
                    Act::Kill => handle.kill_switch().kill(),
                    Act::Revive => handle.kill_switch().revive(),
                    Act::ForceOpen => handle.force_open(),
                    Act::Reset => handle.reset(),
                    Act::OpenFor => unreachable!("read first"),
                }
                log(act, "breaker", &name, None);
                ok(&handle.snapshot())
            }
            Target::KillSwitches => ok(&KillSwitches {
                kill_switches: self.kill_views(),
            }),
            Target::KillSwitch(name) => ok(&self.kill_view(&name, self.kill_switch(&name)?)),
            Target::KillSwitchAct(name, act) => {
                let kill = self.kill_switch(&name)?;
                if act == Act::Kill {
                    kill.kill();
                } else {
                    kill.revive();
                }
                log(act, "kill_switch", &name, None);
                ok(&self.kill_view(&name, kill))
            }
        }
    }
}

fn log(act: Act, kind: &str, name: &str, duration: Option<Duration>) {
    tracing::info!(
        target: "tower_circuit_breaker::admin",
        act = act.as_str(),
        kind,
        name,
        duration_ms = duration.map(|d| d.as_millis() as u64),
        "admin act"
    );
}

/// A `200` with `value` as its JSON body.
fn ok(value: &impl serde::Serialize) -> Result<Next, Problem> {
    Ok(Next::Answer(json(StatusCode::OK, value)))
}

/// What a routed request needs next.
enum Next {
    /// Its answer.
    Answer(Response<AdminBody>),
    /// Its body, a duration to open this breaker for.
    ReadDuration(CircuitBreakerHandle),
}

/// The duration in an `open_for` body: `{"seconds": 30}` (a fraction allowed) or
/// `{"duration_ms": 30000}`, exactly one, more than zero.
fn duration_of(body: &[u8]) -> Result<Duration, Problem> {
    let asked = "the body must be {\"seconds\": N} or {\"duration_ms\": N}";
    let value: serde_json::Value = serde_json::from_slice(body)
        .map_err(|error| Problem::bad_request(format!("{asked}: {error}")))?;
    let Some(object) = value.as_object() else {
        return Err(Problem::bad_request(asked));
    };
    let duration = match (
        object.len(),
        object.get("seconds"),
        object.get("duration_ms"),
    ) {
        (1, Some(seconds), None) => seconds
            .as_f64()
            .filter(|s| s.is_finite() && *s > 0.0)
            .and_then(|s| Duration::try_from_secs_f64(s).ok()),
        (1, None, Some(ms)) => ms.as_u64().filter(|ms| *ms > 0).map(Duration::from_millis),
        _ => return Err(Problem::bad_request(asked)),
    };
    // A number of seconds more than zero can still round to no time at all.
    duration.filter(|d| !d.is_zero()).ok_or_else(|| {
        Problem::bad_request("the duration must be a number more than zero that a clock can hold")
    })
}

impl<B> Service<Request<B>> for Admin
where
    B: Body,
{
    type Response = Response<AdminBody>;
    type Error = Infallible;
    type Future = AdminFuture<B>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let head = request.method() == Method::HEAD;
        let answer =
            |response| State::Answer(Some(if head { head_of(response) } else { response }));
        let state = match self.inner.route(request.method(), request.uri().path()) {
            Err(problem) => answer(problem.response()),
            Ok(Next::Answer(response)) => answer(response),
            Ok(Next::ReadDuration(handle)) => State::Reading {
                body: Box::pin(request.into_body()),
                read: BoundedRead::whole(MAX_BODY),
                handle,
            },
        };
        AdminFuture { state }
    }
}

/// The future of an [`Admin`] call: the answer, after reading the body of a request
/// that has one to read.
pub struct AdminFuture<B> {
    state: State<B>,
}

enum State<B> {
    Answer(Option<Response<AdminBody>>),
    Reading {
        body: Pin<Box<B>>,
        read: BoundedRead,
        handle: CircuitBreakerHandle,
    },
}

impl<B: Body> Future for AdminFuture<B> {
    type Output = Result<Response<AdminBody>, Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let (body, read, handle) = match &mut self.state {
            State::Answer(response) => {
                let response = response.take().expect("polled after completion");
                return Poll::Ready(Ok(response));
            }
            State::Reading { body, read, handle } => (body, read, handle),
        };
        let answer = match ready!(read.poll_read_whole(body, cx)) {
            Ok(()) => open_for(handle, read.bytes()),
            Err(Unread::Body(_)) => Problem::bad_request("the request body broke off").response(),
            Err(Unread::TooLarge) => Problem::body_too_large(MAX_BODY).response(),
        };
        self.state = State::Answer(None);
        Poll::Ready(Ok(answer))
    }
}

/// Opens the breaker for the duration `body` asks for.
fn open_for(handle: &CircuitBreakerHandle, body: &[u8]) -> Response<AdminBody> {
    match duration_of(body) {
        Ok(duration) => {
            handle.open_for(duration);
            log(Act::OpenFor, "breaker", handle.name(), Some(duration));
            json(StatusCode::OK, &handle.snapshot())
        }
        Err(problem) => problem.response(),
    }
}

impl<B> fmt::Debug for AdminFuture<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Answer(_) => "answer",
            State::Reading { .. } => "reading",
        };
        f.debug_struct("AdminFuture")
            .field("state", &state)
            .finish()
    }
}

impl fmt::Debug for Admin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.inner.breakers.iter().map(|h| h.name()).collect();
        let kills: Vec<&str> = self
            .inner
            .kill_switches
            .iter()
            .map(|(n, _)| n.as_str())
            .collect();
        f.debug_struct("Admin")
            .field("breakers", &names)
            .field("kill_switches", &kills)
            .field("mutations", &self.inner.mutations)
            .field("prefix", &self.inner.prefix)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_for_bodies_are_checked() {
        let ok = |body: &str| duration_of(body.as_bytes()).unwrap();
        assert_eq!(ok(r#"{"seconds": 30}"#), Duration::from_secs(30));
        assert_eq!(ok(r#"{"seconds": 0.5}"#), Duration::from_millis(500));
        assert_eq!(ok(r#"{"duration_ms": 1500}"#), Duration::from_millis(1500));
        for bad in [
            "",
            "30",
            "[]",
            "{}",
            r#"{"seconds": 0}"#,
            r#"{"seconds": -1}"#,
            r#"{"seconds": 1e300}"#,
            r#"{"seconds": 1e-10}"#,
            r#"{"seconds": "30"}"#,
            r#"{"duration_ms": 0}"#,
            r#"{"duration_ms": 1.5}"#,
            r#"{"duration_ms": -5}"#,
            r#"{"seconds": 1, "duration_ms": 1000}"#,
            r#"{"minutes": 1}"#,
            r#"{"seconds": 1, "force": true}"#,
            "{\"seconds\": 1",
            "\u{0}",
        ] {
            assert_eq!(
                duration_of(bad.as_bytes()).unwrap_err().status(),
                400,
                "{bad:?}"
            );
        }
    }
}
