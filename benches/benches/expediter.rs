//! The expediter's per-call decision, with 5 tools and with 1,000: it must stay well
//! under the cost of any real tool call and not grow with the number of tools.
//!
//! ```text
//! cargo bench -p tower-circuit-breaker-benches --bench expediter
//! ```

use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use tower_circuit_breaker::expediter::{Alternative, Expediter, Run, ToolSpec};

fn expediter(tools: usize) -> Expediter {
    let specs = (0..tools).map(|i| {
        let spec = ToolSpec::new(&format!("tool-{i}")).provides("something");
        if i == 0 {
            spec.fallback("ask the user")
        } else {
            spec.alternative(Alternative::low(
                &format!("tool-{}", i - 1),
                "instead",
                "a little",
            ))
        }
    });
    Expediter::builder()
        .tools(specs)
        .build()
        .expect("a valid map")
}

/// One decision, polled by hand: with no pre-call check it is ready at once.
fn decide(run: &Run, tool: &str) -> bool {
    let mut cx = Context::from_waker(Waker::noop());
    let future = pin!(run.decide(tool));
    match future.poll(&mut cx) {
        Poll::Ready(decision) => decision.expect("known tool").should_call(),
        Poll::Pending => unreachable!("no pre-call check, so no waiting"),
    }
}

fn decisions(c: &mut Criterion) {
    let mut group = c.benchmark_group("expediter_decide");
    for tools in [5, 1_000] {
        let expediter = expediter(tools);
        let run = expediter.default_run();
        let name = format!("tool-{}", tools / 2);
        group.bench_with_input(BenchmarkId::new("closed_tool", tools), &name, |b, name| {
            b.iter(|| black_box(decide(&run, black_box(name))))
        });
        let open = format!("tool-{}", tools - 1);
        expediter.handle(&open).expect("known").force_open();
        group.bench_with_input(
            BenchmarkId::new("open_tool_routed", tools),
            &open,
            |b, name| b.iter(|| black_box(decide(&run, black_box(name)))),
        );
    }
    group.finish();
}

criterion_group!(benches, decisions);
criterion_main!(benches);
