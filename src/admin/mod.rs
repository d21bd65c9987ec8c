//! An admin endpoint for operators (feature `admin`): a tower `Service` over HTTP
//! requests that shows a set of named breakers and kill switches as JSON, answers a
//! health probe, and, when enabled, lets a person act on them, as resilience4j's
//! actuator endpoints do.
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
//! | `GET /health` | `200` or `503` by the [`HealthRule`]: `{"healthy": false, "unhealthy": [{"name": "chat", "state": "open", "killed": false}]}` |
//! | `POST /breakers/{name}/force_open` | [`force_open`](CircuitBreakerHandle::force_open): this breaker alone, until a reset |
//! | `POST /breakers/{name}/open_for` with `{"seconds": 30}` or `{"duration_ms": 30000}` | [`open_for`](CircuitBreakerHandle::open_for): the snapshot shows `"forced_open": {"until": "time", "ends_in_ms": 30000}` |
//! | `POST /breakers/{name}/reset` | [`reset`](CircuitBreakerHandle::reset); a kill switch still on is not reset, and the answer says so |
//! | `POST /breakers/{name}/kill`, `.../revive` | turns the kill switch the breaker obeys on or off: **shared** with every breaker that obeys it, all of them named in the answer |
//! | `GET /kill_switches`, `GET /kill_switches/{name}` | `{"name": "all-models", "killed": false, "breakers": ["chat", ...]}` (the registered breakers that obey it) |
//! | `POST /kill_switches/{name}/kill`, `.../revive` | flips it; the kill switch after |
//!
//! An act on a breaker answers the snapshot after it, with three more fields: `act`
//! (`"reset"`), `kill_switch` (the switch it obeys: its registered `name` or `null`,
//! `killed`, and `breakers`, every registered breaker a kill stops) and `notes`, lines
//! for the operator: that the switch is shared, that a kill still holds after a reset.
//! A snapshot's `advice` says what a call now gets (`{"kind": "skip", "reason":
//! "killed"}` on a closed breaker whose kill switch is on).
//!
//! Every `GET` path answers `HEAD` too, with the same status and headers and no body.
//! Names in paths are percent-decoded. Under a [`prefix`](AdminBuilder::prefix), every
//! path is below it.
//!
//! - **Every request is guarded, reads included**: the builder must be given a guard —
//!   a [`bearer_token`](AdminBuilder::bearer_token) (compared in constant time), an
//!   [`authorize`](AdminBuilder::authorize) check of the request's head — or be opened
//!   on purpose with [`open_to_anyone`](AdminBuilder::open_to_anyone); without one it
//!   does not build ([`AdminError::NoGuard`]). A refused request gets `401`
//!   (`unauthorized`) before its path is read. The health path can be opened alone for
//!   a probe without credentials ([`open_health_to_anyone`](AdminBuilder::open_health_to_anyone)).
//! - **Nothing secret is shown**: failure messages are [redacted](crate::redact) where
//!   they are made (see [`Failure`](crate::Failure#redaction)), so snapshots carry no
//!   URL credentials, query strings or tokens; the bearer token is never shown.
//! - **Mutations are off unless enabled** ([`AdminBuilder::allow_mutations`]): a `POST`
//!   then gets `403` (`mutations_disabled`). Every change is logged through `tracing`
//!   (target `tower_circuit_breaker::admin`).
//! - **Bad requests get a 4xx JSON error, never a panic**:
//!   `{"error": {"code": "...", "message": "..."}}` with `401` (`unauthorized`, with
//!   `WWW-Authenticate: Bearer` for a token guard), `404` (`not_found`,
//!   `unknown_breaker`, `unknown_kill_switch`), `405` (`method_not_allowed`, with an
//!   `Allow` header), `400` (`bad_request`: a bad escape in the path, a body that is not
//!   the JSON asked for or names a field twice, a duration that is zero, negative or
//!   longer than 100 years, a body that broke off), `408` (`body_timed_out`: a body not
//!   whole within 10 s) or `413` (`body_too_large`: more than 4 KiB).
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
//!     .bearer_token("s3cret-operator-token")
//!     .open_health_to_anyone()
//!     .allow_mutations(true)
//!     .build()?;
//!
//! // No token: refused, reads as well as acts.
//! let request = Request::get("/breakers/chat").body(Full::<Bytes>::default())?;
//! assert_eq!(admin.clone().oneshot(request).await?.status(), 401);
//! // The health path was opened on purpose: a probe needs no token.
//! let request = Request::get("/health").body(Full::<Bytes>::default())?;
//! assert_eq!(admin.clone().oneshot(request).await?.status(), 200);
//!
//! let request = Request::post("/breakers/chat/open_for")
//!     .header("authorization", "Bearer s3cret-operator-token")
//!     .body(Full::new(Bytes::from_static(br#"{"seconds": 30}"#)))?;
//! let response = admin.clone().oneshot(request).await?;
//! assert_eq!(response.status(), 200);
//! let snapshot: serde_json::Value =
//!     serde_json::from_slice(&response.into_body().collect().await?.to_bytes())?;
//! assert_eq!(snapshot["state"], "forced_open");
//! assert_eq!(snapshot["forced_open"]["until"], "time");
//! assert_eq!(chat.handle().state(), State::ForcedOpen);
//!
//! let request = Request::post("/kill_switches/all-models/kill")
//!     .header("authorization", "Bearer s3cret-operator-token")
//!     .body(Full::<Bytes>::default())?;
//! admin.clone().oneshot(request).await?;
//! assert!(all_models.is_killed());
//!
//! let request = Request::get("/health").body(Full::<Bytes>::default())?;
//! assert_eq!(admin.clone().oneshot(request).await?.status(), 503);
//!
//! let request = Request::delete("/breakers/chat")
//!     .header("authorization", "Bearer s3cret-operator-token")
//!     .body(Full::<Bytes>::default())?;
//! let response = admin.oneshot(request).await?;
//! assert_eq!(response.status(), 405);
//! # Ok(()) }
//! ```

mod guard;
mod health;
mod reply;
mod route;

use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use ::http::request::Parts;
use ::http::{Method, Request, Response, StatusCode};
use http_body::Body;
use tower::Service;

use self::guard::Guard;
pub use self::health::HealthRule;
use self::health::HealthView;
pub use self::reply::AdminBody;
use self::reply::{head_of, json, Problem};
use self::route::{Act, Target};
use crate::http::bounded_read::{BoundedRead, Unread};
use crate::later::LONGEST_WAIT;
use crate::snapshot::Snapshot;
use crate::CircuitBreakerHandle;
use crate::KillSwitch;

/// How long the admin service waits for a request body to be whole: a client that
/// sends part of one and stops is answered `408`, not waited for.
const BODY_WAIT: Duration = Duration::from_secs(10);

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
    /// The prefix is not empty and does not start with `/`, or ends with one, or holds
    /// what no request's path can start with as it comes (a space, a character past
    /// ASCII, `?`, `#`, a `%` that is not an escape like `%20`, `//`).
    #[error("the prefix must be empty or start with '/', not end with it, and hold only what a path holds as it comes (visible ASCII, escapes like %20, no '?', '#' or '//'), got {0:?}")]
    BadPrefix(String),
    /// No guard was chosen: every request, reads included, needs one
    /// ([`bearer_token`](AdminBuilder::bearer_token),
    /// [`authorize`](AdminBuilder::authorize)), or the service must be opened on purpose
    /// ([`open_to_anyone`](AdminBuilder::open_to_anyone)).
    #[error("the admin service has no guard: choose bearer_token or authorize, or open_to_anyone on purpose")]
    NoGuard,
    /// Two guards were chosen (a token and `open_to_anyone`, say): which one holds would
    /// be a guess.
    #[error("the admin service was given two guards ({0} and {1}): choose one")]
    TwoGuards(&'static str, &'static str),
    /// The bearer token is empty or holds a character a header cannot carry as a token
    /// (only visible ASCII: no space or control character).
    #[error("the bearer token must be visible ASCII and not empty")]
    BadToken,
}

/// Settings for an [`Admin`] service, checked by [`build`](Self::build). A guard must be
/// chosen: [`bearer_token`](Self::bearer_token), [`authorize`](Self::authorize), or
/// [`open_to_anyone`](Self::open_to_anyone).
#[derive(Debug, Clone, Default)]
pub struct AdminBuilder {
    breakers: Vec<CircuitBreakerHandle>,
    kill_switches: Vec<(String, KillSwitch)>,
    mutations: bool,
    prefix: String,
    guards: Vec<Guard>,
    bad_token: bool,
    health: HealthRule,
    health_open: bool,
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

    /// Admits only requests with `Authorization: Bearer <token>` (the scheme in any case),
    /// reads and acts alike; the token is compared in constant time, and never shown
    /// (not in `Debug`, not in an answer). Anything else gets `401` (`unauthorized`, with
    /// `WWW-Authenticate: Bearer`), the same for no token and a wrong one.
    ///
    /// # Errors
    ///
    /// [`build`](Self::build) refuses an empty token or one with a space or a control
    /// character ([`AdminError::BadToken`]).
    pub fn bearer_token(mut self, token: impl AsRef<str>) -> Self {
        let token = token.as_ref();
        self.bad_token |= !Guard::token_is_valid(token);
        self.guards.push(Guard::Bearer(Arc::from(token.as_bytes())));
        self
    }

    /// Admits only requests whose head `authorize` accepts (`true`), reads and acts
    /// alike: the application's own check (an mTLS peer put in the extensions by its
    /// server, a header its proxy sets, several tokens). Others get `401`
    /// (`unauthorized`). It is given the head only; the body is not read before it
    /// agrees.
    ///
    /// ```
    /// use tower_circuit_breaker::admin::Admin;
    ///
    /// let admin = Admin::builder()
    ///     .authorize(|head: &http::request::Parts| {
    ///         head.headers.get("x-operator").is_some_and(|v| v == "on-call")
    ///     })
    ///     .build()?;
    /// # Ok::<(), tower_circuit_breaker::admin::AdminError>(())
    /// ```
    pub fn authorize(mut self, authorize: impl Fn(&Parts) -> bool + Send + Sync + 'static) -> Self {
        self.guards.push(Guard::Authorize(Arc::new(authorize)));
        self
    }

    /// Serves anyone who reaches it, without credentials: reads (breaker names, states,
    /// failure messages, [redacted](crate::redact)) and, with
    /// [`allow_mutations`](Self::allow_mutations), acts. For a listener only trusted
    /// parties reach (a loopback or a private socket) or a service already guarded by
    /// a layer of the application's own. The choice is explicit: a builder with no guard
    /// does not build ([`AdminError::NoGuard`]).
    pub fn open_to_anyone(mut self) -> Self {
        self.guards.push(Guard::Open);
        self
    }

    /// Which breakers make `GET /health` answer `503`; default: [`HealthRule::default`]
    /// (open, forced open, or killed).
    pub fn health_rule(mut self, rule: HealthRule) -> Self {
        self.health = rule;
        self
    }

    /// Serves `GET /health` (and `HEAD`) without credentials, whatever the guard: a
    /// load balancer's or Kubernetes' probe usually has no token. It answers breaker
    /// names and states only, no failure message. Off by default: the health path is
    /// guarded like every other.
    pub fn open_health_to_anyone(mut self) -> Self {
        self.health_open = true;
        self
    }

    /// Whether `POST` requests may act (kill, revive, force open, open for a time,
    /// reset). Off by default: the service only reads. Acts are guarded as reads are,
    /// by the guard chosen.
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
    /// [`AdminError`]: no guard chosen, or two; a bad bearer token; two breakers or two
    /// kill switches with one name, an empty kill switch name, a bad prefix.
    pub fn build(mut self) -> Result<Admin, AdminError> {
        let prefix = &self.prefix;
        // Compared with the path as it comes, still escaped: a prefix a path cannot
        // start with as it is (a space, a character past ASCII, `?`, `#`, a `%` that is
        // not an escape, `//`) would match no request.
        let unmatchable = |c: char| {
            !c.is_ascii_graphic() || matches!(c, '?' | '#' | '<' | '>' | '`' | '"' | '{' | '}')
        };
        // A `%` starts an escape, as the path holds it (`/a%20b`).
        let bad_escape = prefix
            .split('%')
            .skip(1)
            .any(|rest| rest.len() < 2 || !rest.as_bytes()[..2].iter().all(u8::is_ascii_hexdigit));
        if !prefix.is_empty()
            && (!prefix.starts_with('/')
                || prefix.ends_with('/')
                || prefix.contains("//")
                || prefix.contains(unmatchable)
                || bad_escape)
        {
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
        let guard = match self.guards.len() {
            0 => return Err(AdminError::NoGuard),
            1 => self.guards.remove(0),
            _ => {
                let (first, second) = (self.guards[0].name(), self.guards[1].name());
                return Err(AdminError::TwoGuards(first, second));
            }
        };
        if self.bad_token {
            return Err(AdminError::BadToken);
        }
        Ok(Admin {
            inner: Arc::new(Inner {
                breakers: self.breakers,
                kill_switches: self.kill_switches,
                mutations: self.mutations,
                prefix: self.prefix,
                guard,
                health: self.health,
                health_open: self.health_open,
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
    guard: Guard,
    health: HealthRule,
    health_open: bool,
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
    /// Its name, `None` for a breaker's switch not registered with the admin.
    name: Option<String>,
    killed: bool,
    /// The registered breakers that obey it: every one a kill stops.
    breakers: Vec<String>,
}

/// The answer to an act on a breaker: the [`Snapshot`] after it, its fields at the top,
/// with the act, the kill switch the breaker obeys, and notes for the operator.
#[derive(serde::Serialize)]
struct ActAnswer {
    #[serde(flatten)]
    snapshot: Snapshot,
    act: &'static str,
    kill_switch: KillView,
    notes: Vec<String>,
}

impl Admin {
    /// Settings for a service with no breaker yet, mutations off, and no guard yet (one
    /// must be chosen before it builds).
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
        self.switch_view(Some(name), kill)
    }

    fn switch_view(&self, name: Option<&str>, kill: &KillSwitch) -> KillView {
        KillView {
            name: name.map(str::to_string),
            killed: kill.is_killed(),
            breakers: self
                .breakers
                .iter()
                .filter(|handle| handle.kill_switch() == kill)
                .map(|handle| handle.name().to_string())
                .collect(),
        }
    }

    /// The kill switch `handle` obeys, under its registered name if it has one.
    fn switch_of(&self, handle: &CircuitBreakerHandle) -> KillView {
        let kill = handle.kill_switch();
        let name = self
            .kill_switches
            .iter()
            .find(|(_, registered)| registered == kill)
            .map(|(name, _)| name.as_str());
        self.switch_view(name, kill)
    }

    /// The state of the registered breaker named `name`, if there is one.
    fn state_of(&self, name: &str) -> Option<crate::State> {
        let handle = self.breakers.iter().find(|handle| handle.name() == name)?;
        Some(handle.state())
    }

    /// The answer to `act` on `handle`, done: the snapshot after, the switch it obeys,
    /// and what the operator might not expect.
    fn act_answer(&self, act: Act, handle: &CircuitBreakerHandle) -> ActAnswer {
        let snapshot = handle.snapshot();
        let kill_switch = self.switch_of(handle);
        let mut notes = Vec::new();
        let others: Vec<&str> = kill_switch
            .breakers
            .iter()
            .map(String::as_str)
            .filter(|name| *name != handle.name())
            .collect();
        if act == Act::Kill && !others.is_empty() {
            notes.push(format!(
                "the kill switch is shared: it also stops {}; force_open acts on this breaker alone",
                others.join(", ")
            ));
        }
        if act == Act::Revive && !others.is_empty() {
            // A revive lets through only the breakers whose own state does: one open or
            // forced open still skips its calls, and the operator is told so.
            let (held, freed): (Vec<_>, Vec<_>) = others
                .iter()
                .map(|name| (*name, self.state_of(name)))
                .partition(|(_, state)| {
                    matches!(state, Some(crate::State::Open | crate::State::ForcedOpen))
                });
            if !freed.is_empty() {
                let freed: Vec<&str> = freed.iter().map(|(name, _)| *name).collect();
                notes.push(format!(
                    "the kill switch is shared: it also lets through {}; force_open acts on this breaker alone",
                    freed.join(", ")
                ));
            }
            for (name, state) in held {
                let state = state.map_or("open", |state| state.as_str());
                notes.push(format!(
                    "the kill switch is shared: {name} is still {state} on its own and skips its calls"
                ));
            }
        }
        if snapshot.killed && act != Act::Kill {
            notes.push(
                "the kill switch is still on: calls are skipped until it is revived".to_string(),
            );
        }
        ActAnswer {
            snapshot,
            act: act.as_str(),
            kill_switch,
            notes,
        }
    }

    fn kill_views(&self) -> Vec<KillView> {
        self.kill_switches
            .iter()
            .map(|(name, kill)| self.kill_view(name, kill))
            .collect()
    }

    /// What to do with a request: answer it now, or read its body first. The guard
    /// decides first, before the path is even read (a refused request learns nothing of
    /// what exists), except for the health path when it is open to anyone. HEAD is
    /// answered wherever GET is (RFC 9110 §9.1), without the body.
    fn route(&self, parts: &Parts) -> Result<Next, Problem> {
        let method = if parts.method == Method::HEAD {
            &Method::GET
        } else {
            &parts.method
        };
        let path = parts.uri.path();
        let open_health = self.health_open
            && *method == Method::GET
            && Target::parse(&self.prefix, path) == Ok(Target::Health);
        if !open_health && !self.guard.admits(parts) {
            return Err(Problem::unauthorized(self.guard.is_bearer()));
        }
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
            Target::Health => {
                let view = HealthView::of(&self.health, self.snapshots());
                let status = if view.healthy {
                    StatusCode::OK
                } else {
                    StatusCode::SERVICE_UNAVAILABLE
                };
                Ok(Next::Answer(json(status, &view)))
            }
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
                ok(&self.act_answer(act, handle))
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

/// An `open_for` body as sent: a field given twice is refused, not the last one taken.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct OpenFor {
    seconds: Option<serde_json::Number>,
    duration_ms: Option<serde_json::Number>,
}

/// The duration in an `open_for` body: `{"seconds": 30}` (a fraction allowed) or
/// `{"duration_ms": 30000}`, exactly one, more than zero and at most a century (a time
/// further off is not cut short without a word).
fn duration_of(body: &[u8]) -> Result<Duration, Problem> {
    let asked = "the body must be {\"seconds\": N} or {\"duration_ms\": N}";
    // An object, with no field `null`: an array or a null would read as one here.
    let value: serde_json::Value = serde_json::from_slice(body)
        .map_err(|error| Problem::bad_request(format!("{asked}: {error}")))?;
    if !value
        .as_object()
        .is_some_and(|object| object.values().all(|v| !v.is_null()))
    {
        return Err(Problem::bad_request(asked));
    }
    let open_for: OpenFor = serde_json::from_slice(body)
        .map_err(|error| Problem::bad_request(format!("{asked}: {error}")))?;
    let duration = match (open_for.seconds, open_for.duration_ms) {
        (Some(seconds), None) => seconds
            .as_f64()
            .filter(|s| s.is_finite() && *s > 0.0)
            .and_then(|s| Duration::try_from_secs_f64(s).ok()),
        (None, Some(ms)) => match ms.as_u64() {
            Some(ms) => Some(Duration::from_millis(ms)),
            // Not an integer: refused, with a message that says so (not the range's, which
            // `1000.0` is within).
            None => match ms.as_f64() {
                Some(ms) if ms.is_finite() && ms.fract() != 0.0 => {
                    return Err(Problem::bad_request(
                        "duration_ms must be a whole number of milliseconds (seconds may have a fraction)",
                    ))
                }
                Some(ms) if ms > 0.0 && ms < u64::MAX as f64 => {
                    return Err(Problem::bad_request(
                        "duration_ms must be written as an integer (1000, not 1000.0 or 1e3)",
                    ))
                }
                _ => None,
            },
        },
        _ => return Err(Problem::bad_request(asked)),
    };
    // A number of seconds more than zero can still round to no time at all.
    duration
        .filter(|d| !d.is_zero() && *d <= LONGEST_WAIT)
        .ok_or_else(|| {
            Problem::bad_request("the duration must be more than zero and at most 100 years")
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
        let (parts, body) = request.into_parts();
        let head = parts.method == Method::HEAD;
        let answer =
            |response| State::Answer(Some(if head { head_of(response) } else { response }));
        let state = match self.inner.route(&parts) {
            Err(problem) => answer(problem.response()),
            Ok(Next::Answer(response)) => answer(response),
            Ok(Next::ReadDuration(handle)) => State::Reading {
                body: Box::pin(body),
                read: BoundedRead::whole(MAX_BODY),
                deadline: Deadline::from(tokio::time::Instant::now() + BODY_WAIT),
                handle,
                admin: self.inner.clone(),
            },
        };
        AdminFuture { state }
    }
}

/// When a request body is given up on: its timer made only if the body is not whole at
/// once (a request whose body is already there needs no timer, nor a runtime's).
struct Deadline {
    at: tokio::time::Instant,
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl From<tokio::time::Instant> for Deadline {
    fn from(at: tokio::time::Instant) -> Self {
        Deadline { at, timer: None }
    }
}

impl Deadline {
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let at = self.at;
        self.timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)))
            .as_mut()
            .poll(cx)
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
        /// When a body still not whole is given up on.
        deadline: Deadline,
        handle: CircuitBreakerHandle,
        admin: Arc<Inner>,
    },
}

impl<B: Body> Future for AdminFuture<B> {
    type Output = Result<Response<AdminBody>, Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let (body, read, deadline, handle, admin) = match &mut self.state {
            State::Answer(response) => {
                let response = response.take().expect("polled after completion");
                return Poll::Ready(Ok(response));
            }
            State::Reading {
                body,
                read,
                deadline,
                handle,
                admin,
            } => (body, read, deadline, handle, admin),
        };
        let answer = match read.poll_read_whole(body, cx) {
            Poll::Ready(Ok(())) => open_for(admin, handle, read.bytes()),
            Poll::Ready(Err(Unread::Body(_))) => {
                Problem::bad_request("the request body broke off").response()
            }
            Poll::Ready(Err(Unread::TooLarge)) => Problem::body_too_large(MAX_BODY).response(),
            Poll::Pending => {
                ready!(deadline.poll(cx));
                Problem::body_timed_out(BODY_WAIT).response()
            }
        };
        self.state = State::Answer(None);
        Poll::Ready(Ok(answer))
    }
}

/// Opens the breaker for the duration `body` asks for.
fn open_for(admin: &Inner, handle: &CircuitBreakerHandle, body: &[u8]) -> Response<AdminBody> {
    match duration_of(body) {
        Ok(duration) => {
            handle.open_for(duration);
            log(Act::OpenFor, "breaker", handle.name(), Some(duration));
            json(StatusCode::OK, &admin.act_answer(Act::OpenFor, handle))
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
            .field("guard", &self.inner.guard)
            .field("health", &self.inner.health)
            .field("health_open", &self.inner.health_open)
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
