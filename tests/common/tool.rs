//! A tool for the expediter's tests: a `tower::service_fn` that counts its own calls,
//! wrapped with the expediter's layer for that tool, and driven the way an agent drives
//! it (decide, then call only if the decision says so).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};

use tower::util::BoxService;
use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
use tower_circuit_breaker::error::BoxError;
use tower_circuit_breaker::expediter::{Action, Attempt, Decision, Expediter};
use tower_circuit_breaker::Answer;

pub(crate) type Svc = BoxService<String, Answer<String>, BoxError>;

/// What a tool's service saw, and how it behaves.
#[derive(Clone, Default)]
pub(crate) struct Ctl {
    /// `Some(message)`: every call fails with this message.
    pub(crate) failing: Arc<Mutex<Option<String>>>,
    pub(crate) calls: Arc<AtomicUsize>,
    /// Every request that reached the service.
    pub(crate) seen: Arc<Mutex<Vec<String>>>,
    /// Calls by the breaker state at the moment the service ran ("killed" if the kill
    /// switch was on).
    pub(crate) by_state: Arc<Mutex<HashMap<&'static str, usize>>>,
}

/// A tool: its counting `service_fn` wrapped with the expediter's layer for it.
pub(crate) struct Tool {
    pub(crate) name: &'static str,
    pub(crate) svc: Svc,
    pub(crate) ctl: Ctl,
    pub(crate) requests: usize,
}

impl Tool {
    pub(crate) fn new(expediter: &Expediter, name: &'static str) -> Tool {
        let ctl = Ctl::default();
        let handle = expediter.handle(name).expect("a known tool");
        let seen = ctl.clone();
        let inner = service_fn(move |request: String| {
            let snapshot = handle.snapshot();
            let state = if snapshot.killed {
                "killed"
            } else {
                snapshot.state.as_str()
            };
            seen.calls.fetch_add(1, SeqCst);
            seen.seen.lock().unwrap().push(request.clone());
            *seen.by_state.lock().unwrap().entry(state).or_default() += 1;
            let failing = seen.failing.lock().unwrap().clone();
            async move {
                match failing {
                    Some(message) => Err(std::io::Error::other(message)),
                    None => Ok(format!("{name} answered {request}")),
                }
            }
        });
        let svc = ServiceBuilder::new()
            .layer(expediter.layer(name).expect("a known tool"))
            .service(inner);
        Tool {
            name,
            svc: BoxService::new(svc),
            ctl,
            requests: 0,
        }
    }

    pub(crate) fn fail_with(&self, message: &str) {
        *self.ctl.failing.lock().unwrap() = Some(message.to_string());
    }

    pub(crate) fn heal(&self) {
        *self.ctl.failing.lock().unwrap() = None;
    }

    pub(crate) fn calls(&self) -> usize {
        self.ctl.calls.load(SeqCst)
    }

    pub(crate) fn calls_in(&self, state: &str) -> usize {
        self.ctl
            .by_state
            .lock()
            .unwrap()
            .get(state)
            .copied()
            .unwrap_or(0)
    }

    pub(crate) fn next_request(&mut self) -> String {
        self.requests += 1;
        format!("{}-request-{}", self.name, self.requests)
    }

    /// Calls the service directly (the agent acting on a CALL or PROBE decision).
    pub(crate) async fn call(&mut self) -> Result<Answer<String>, BoxError> {
        let request = self.next_request();
        self.svc.ready().await?.call(request).await
    }

    /// One agent step for this tool: decide, and call only if the decision says so.
    pub(crate) async fn attempt(&mut self, expediter: &Expediter) -> Decision {
        let decision = expediter
            .default_run()
            .decide(self.name)
            .await
            .expect("a known tool");
        if decision.should_call() {
            let _ = self.call().await;
        }
        decision
    }

    /// One agent step through `Run::execute`, in the expediter's default run.
    pub(crate) async fn execute(&mut self, expediter: &Expediter) -> Attempt<String> {
        let request = self.next_request();
        expediter
            .default_run()
            .execute(self.name, &mut self.svc, request)
            .await
            .expect("a known tool")
    }

    /// Fails calls, each allowed by a CALL decision, until the expediter sees a
    /// systemic event (at most 3: then its breaker opens). Returns how many.
    pub(crate) async fn fail_until_systemic(
        &mut self,
        expediter: &Expediter,
        message: &str,
    ) -> usize {
        self.fail_with(message);
        for n in 1..=3 {
            let decision = expediter
                .default_run()
                .decide(self.name)
                .await
                .expect("a known tool");
            assert_eq!(
                decision.action,
                Action::Call,
                "{}: failing call {n}",
                self.name
            );
            assert!(self.call().await.is_err());
            if expediter.report().systemic.is_some() {
                return n;
            }
        }
        panic!("{}: no systemic event\n{}", self.name, expediter.report());
    }

    /// Fails `n` calls in a row, each one allowed by a CALL decision.
    pub(crate) async fn fail_times(&mut self, expediter: &Expediter, n: usize, message: &str) {
        self.fail_with(message);
        for i in 0..n {
            let decision = expediter
                .default_run()
                .decide(self.name)
                .await
                .expect("a known tool");
            assert_eq!(
                decision.action,
                Action::Call,
                "{}: failing call {} of {n} should be allowed",
                self.name,
                i + 1
            );
            assert!(self.call().await.is_err());
        }
    }
}
