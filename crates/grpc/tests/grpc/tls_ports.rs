//! A gRPC port that enforces TLS refuses plaintext calls.

use std::time::Duration;

use crate::common::*;
use tidemark_grpc::proto::messaging_service_client::MessagingServiceClient;
use tidemark_grpc::proto::*;
use tonic::Request;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enforcing_grpc_port_refuses_plaintext_calls() {
    let (namesrv, _namesrv_stop) = start_namesrv().await;
    let server = start_broker_with(&namesrv, "broker-a", true, |config| {
        config.tls_mode = "enforcing".into();
    })
    .await;
    // Plaintext HTTP/2 (tonic's client without TLS) never gets a call through.
    let mut answered = false;
    for _ in 0..10 {
        if let Ok(mut client) =
            MessagingServiceClient::connect(format!("http://{}", server.grpc)).await
        {
            let route = client
                .query_route(Request::new(QueryRouteRequest {
                    topic: Some(resource("GrpcTopic")),
                    endpoints: None,
                }))
                .await;
            answered |= route.is_ok();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        !answered,
        "a plaintext gRPC call was served in enforcing mode"
    );
}
