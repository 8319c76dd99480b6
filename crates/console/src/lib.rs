//! `tidemark-console`: the HTTP surface for operators — a broker's `/metrics` (OpenMetrics
//! text for Prometheus) and web console (`/`, see [`web`]), a controller's `/metrics`
//! ([`controller`]), and the console on its own over a whole cluster ([`serve_cluster`],
//! `tidemark console`). It depends on the broker and the client, never the other way.

pub mod cluster_names;
pub mod controller;
pub mod metrics;
pub mod trends;
pub mod web;

use std::future::Future;
use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use tidemark_broker::BrokerState;
use tokio::net::TcpListener;
use tracing::info;

/// What `/metrics` answers with.
pub const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

async fn metrics(State(state): State<Arc<BrokerState>>) -> impl IntoResponse {
    // Rendering reads every queue's bounds and a store timestamp per lagging queue: off the
    // async workers.
    let rendered =
        tokio::task::spawn_blocking(move || metrics::render(&state, tidemark_remoting::now_ms()))
            .await;
    match rendered {
        Ok(text) => ([(header::CONTENT_TYPE, METRICS_CONTENT_TYPE)], text).into_response(),
        Err(_) => (
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            "metrics could not be rendered",
        )
            .into_response(),
    }
}

/// Serves the HTTP endpoints on `listener` for `state`'s broker until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    state: Arc<BrokerState>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let port = listener.local_addr()?.port();
    let trends = Arc::new(trends::Trends::default());
    let sampler = tokio::spawn(trends::run(trends.clone(), state.clone()));
    let console = Arc::new(web::Console::new(state.clone(), trends));
    let router = Router::new()
        .route("/metrics", get(metrics))
        .with_state(state)
        .merge(web::routes(console));
    info!(port, "HTTP serving /metrics and the web console at /");
    // The console needs the peer's address: a white-listed one needs no credentials.
    let served = axum::serve(
        listener,
        router.into_make_service_with_connect_info::<std::net::SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown)
    .await;
    sampler.abort();
    served
}

/// Serves a console on its own (`tidemark console`) on `listener` until `shutdown` resolves:
/// the cluster `settings` name, seen through admin requests only; its charts sampled the same
/// way with the console's own account.
pub async fn serve_cluster(
    listener: TcpListener,
    settings: web::ClusterSettings,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let port = listener.local_addr()?.port();
    let trends = Arc::new(trends::Trends::default());
    let admin = tidemark_client::Admin::connect(settings.client.clone())
        .await
        .map_err(|failure| {
            std::io::Error::other(format!("no admin connection to the name server: {failure}"))
        })?;
    let admin = Arc::new(admin);
    let sampler = tokio::spawn(trends::run_cluster(trends.clone(), admin.clone()));
    let console = Arc::new(web::Console::standalone(settings, trends));
    info!(port, "HTTP serving the cluster's web console at /");
    let served = axum::serve(
        listener,
        web::routes(console).into_make_service_with_connect_info::<std::net::SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown)
    .await;
    sampler.abort();
    admin.shutdown().await;
    served
}
