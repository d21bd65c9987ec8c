//! The admin service mounted in an axum application: the app's own route (`/ask`, a model
//! behind a breaker with a fallback) next to the admin service nested under `/admin`,
//! behind its bearer token. The example checks itself over HTTP and exits: without the
//! token the admin answers 401; with it, it lists the breakers, kills the model through
//! its kill switch (the app then answers from the fallback) and revives it.
//!
//! ```text
//! cargo run --example admin_axum
//! ```

use std::convert::Infallible;

use tower::{service_fn, ServiceBuilder, ServiceExt};
use tower_circuit_breaker::admin::Admin;
use tower_circuit_breaker::{CircuitBreakerLayer, KillSwitch};

/// In a real service, read from the environment or a secret store.
const TOKEN: &str = "operator-token-from-a-secret-store";

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let kill = KillSwitch::new();
    let breaker = CircuitBreakerLayer::builder()
        .name("model")
        .kill_switch(kill.clone())
        .build()?;
    let admin = Admin::builder()
        .breakers([breaker.handle()])
        .kill_switch("all-models", kill)
        .bearer_token(TOKEN)
        .allow_mutations(true)
        .build()?;
    let model = ServiceBuilder::new()
        .layer(breaker.with_fallback(service_fn(|_: String| async {
            Ok::<_, Infallible>("the model is paused; try again later".to_string())
        })))
        .service(service_fn(|question: String| async move {
            Ok::<_, Infallible>(format!("an answer to {question:?}"))
        }));

    let app = axum::Router::new()
        .route(
            "/ask",
            axum::routing::get(move || {
                let model = model.clone();
                async move {
                    match model.oneshot("six times seven".to_string()).await {
                        Ok(answer) => answer.into_inner(),
                        Err(error) => format!("error: {error}"),
                    }
                }
            }),
        )
        .nest_service("/admin", admin);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    println!("serving http://{addr}/ask and http://{addr}/admin/");

    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(10))
        .build()?;
    let get = |path: &str, token: Option<&str>| {
        let mut request = client.get(format!("http://{addr}{path}"));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        request.send()
    };
    let post = |path: &str| {
        client
            .post(format!("http://{addr}{path}"))
            .bearer_auth(TOKEN)
            .send()
    };

    let refused = get("/admin/breakers", None).await?;
    println!(
        "GET /admin/breakers without the token: {}",
        refused.status()
    );
    assert_eq!(refused.status(), reqwest::StatusCode::UNAUTHORIZED);

    let listed = get("/admin/breakers", Some(TOKEN)).await?;
    println!("GET /admin/breakers with it: {}", listed.status());
    let listed = listed.text().await?;
    assert!(listed.contains("\"model\""), "{listed}");

    println!("GET /ask: {}", get("/ask", None).await?.text().await?);
    let killed = post("/admin/kill_switches/all-models/kill").await?;
    println!(
        "POST /admin/kill_switches/all-models/kill: {}",
        killed.status()
    );
    assert!(killed.status().is_success());
    let paused = get("/ask", None).await?.text().await?;
    println!("GET /ask: {paused}");
    assert_eq!(paused, "the model is paused; try again later");

    let revived = post("/admin/kill_switches/all-models/revive").await?;
    println!(
        "POST /admin/kill_switches/all-models/revive: {}",
        revived.status()
    );
    assert!(revived.status().is_success());
    let answered = get("/ask", None).await?.text().await?;
    println!("GET /ask: {answered}");
    assert!(answered.starts_with("an answer"), "{answered}");
    Ok(())
}
