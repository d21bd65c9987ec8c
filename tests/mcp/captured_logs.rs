//! Every `tracing` event and span field, at every level and from every target, captured
//! as text while a test runs, so that a test can say what never reached the logs.

use std::fmt::{self, Write as _};
use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::{DefaultGuard, Interest};
use tracing::{Event, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

/// The text captured so far; capturing stops when this is dropped. Only the thread that
/// made it is captured: run the test on a current-thread runtime.
pub struct CapturedLogs {
    text: Arc<Mutex<String>>,
    _guard: DefaultGuard,
}

impl CapturedLogs {
    pub fn start() -> CapturedLogs {
        let text = Arc::new(Mutex::new(String::new()));
        let layer = Capture(text.clone());
        let guard = tracing::subscriber::set_default(tracing_subscriber::registry().with(layer));
        CapturedLogs {
            text,
            _guard: guard,
        }
    }

    /// Each event as a line: its level, target, and every field (an error's every source).
    pub fn text(&self) -> String {
        self.text.lock().unwrap().clone()
    }
}

struct Capture(Arc<Mutex<String>>);

impl Capture {
    fn line(&self, head: fmt::Arguments<'_>, record: impl FnOnce(&mut Fields)) {
        let mut fields = Fields(String::new());
        record(&mut fields);
        let mut text = self.0.lock().unwrap();
        let _ = writeln!(text, "{head}{}", fields.0);
    }
}

impl<S: Subscriber> Layer<S> for Capture {
    fn register_callsite(&self, _: &'static Metadata<'static>) -> Interest {
        Interest::always()
    }

    fn enabled(&self, _: &Metadata<'_>, _: Context<'_, S>) -> bool {
        true
    }

    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let meta = event.metadata();
        self.line(format_args!("{} {}:", meta.level(), meta.target()), |f| {
            event.record(f)
        });
    }

    fn on_new_span(&self, attrs: &Attributes<'_>, _: &Id, _: Context<'_, S>) {
        let meta = attrs.metadata();
        self.line(
            format_args!("span {} {}:", meta.target(), meta.name()),
            |f| attrs.record(f),
        );
    }

    fn on_record(&self, _: &Id, values: &Record<'_>, _: Context<'_, S>) {
        self.line(format_args!("span record:"), |f| values.record(f));
    }
}

struct Fields(String);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let _ = write!(self.0, " {}={value:?}", field.name());
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        let _ = write!(self.0, " {}={value}", field.name());
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        let _ = write!(self.0, " {}={value} ({value:?})", field.name());
        let mut source = value.source();
        while let Some(error) = source {
            let _ = write!(self.0, " caused by {error} ({error:?})");
            source = error.source();
        }
    }
}
