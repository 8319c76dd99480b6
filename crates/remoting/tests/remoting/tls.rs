//! TLS on a remoting port over real loopback sockets: the three server modes, certificate
//! checks both ways (wrong CA, expired), stalled handshakes, and certificates reloaded from
//! changed files. Every wait is bounded; servers bind 127.0.0.1:0.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
use tidemark_protocol::{RemotingCommand, RequestCode, ResponseCode};
use tidemark_remoting::tls::{
    ClientTls, ClientTlsSettings, PemFiles, ServerTls, ServerTlsSettings, TlsMode,
};
use tidemark_remoting::{
    handler_fn, serve, Channel, ClientConfig, RemotingClient, Reply, ServerConfig,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

const WAIT: Duration = Duration::from_secs(5);

/// A CA that signs leaf certificates, written as PEM files in a temp dir.
struct Authority {
    cert: rcgen::Certificate,
    key: KeyPair,
    dir: PathBuf,
    name: String,
}

impl Authority {
    fn new(dir: &Path, name: &str) -> Authority {
        let key = KeyPair::generate().expect("CA key");
        let mut params = CertificateParams::new(Vec::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, format!("{name} test CA"));
        let cert = params.self_signed(&key).expect("CA certificate");
        std::fs::write(dir.join(format!("{name}-ca.pem")), cert.pem()).expect("write CA");
        Authority {
            cert,
            key,
            dir: dir.to_path_buf(),
            name: name.to_owned(),
        }
    }

    fn ca_file(&self) -> PathBuf {
        self.dir.join(format!("{}-ca.pem", self.name))
    }

    /// A certificate for localhost and 127.0.0.1; `expired`: valid only in 2020.
    fn leaf(&self, label: &str, expired: bool) -> PemFiles {
        let key = KeyPair::generate().expect("leaf key");
        let mut params =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
                .expect("leaf params");
        if expired {
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = rcgen::date_time_ymd(2020, 12, 31);
        }
        let cert = params
            .signed_by(&key, &self.cert, &self.key)
            .expect("leaf certificate");
        let files = PemFiles {
            certificate: self.dir.join(format!("{}-{label}.pem", self.name)),
            private_key: self.dir.join(format!("{}-{label}.key", self.name)),
        };
        std::fs::write(&files.certificate, cert.pem()).expect("write certificate");
        std::fs::write(&files.private_key, key.serialize_pem()).expect("write key");
        files
    }
}

struct Server {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    async fn start(tls: Option<Arc<ServerTls>>) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("bound");
        let handler = handler_fn(|_channel: Channel, request: RemotingCommand| async move {
            Reply::Response(
                RemotingCommand::response(ResponseCode::Success, None).with_body(request.body),
            )
        });
        let config = ServerConfig {
            tls,
            ..ServerConfig::default()
        };
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(serve(listener, Arc::new(handler), config, async {
            let _ = stopped.await;
        }));
        Server {
            addr,
            stop: Some(stop),
            task,
        }
    }

    async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        tokio::time::timeout(Duration::from_secs(10), &mut self.task)
            .await
            .expect("server stops")
            .expect("no panic");
    }
}

fn server_tls(settings: ServerTlsSettings) -> Arc<ServerTls> {
    Arc::new(ServerTls::new(settings, Vec::new()).expect("server TLS"))
}

fn client(tls: Option<ClientTlsSettings>) -> RemotingClient {
    RemotingClient::new(
        ClientConfig {
            tls: tls.map(|settings| Arc::new(ClientTls::new(&settings).expect("client TLS"))),
            ..ClientConfig::default()
        },
        None,
    )
}

/// Whether a round trip with `client` to `server` succeeds, echoing its body.
async fn round_trip(client: &RemotingClient, server: &Server) -> bool {
    let request = RemotingCommand::request(RequestCode::HeartBeat).with_body(&b"over the wire"[..]);
    match client.invoke(&server.addr.to_string(), request, WAIT).await {
        Ok(response) => {
            assert_eq!(&response.body[..], b"over the wire");
            true
        }
        Err(_) => false,
    }
}

fn any_server() -> ClientTlsSettings {
    ClientTlsSettings::default()
}

#[tokio::test]
async fn permissive_serves_tls_and_plaintext_clients_on_one_port() {
    let server = Server::start(Some(server_tls(ServerTlsSettings::default()))).await;
    let (tls, plain) = (client(Some(any_server())), client(None));
    for _ in 0..3 {
        assert!(round_trip(&tls, &server).await, "TLS client served");
        assert!(round_trip(&plain, &server).await, "plaintext client served");
    }
    server.shutdown().await;
}

#[tokio::test]
async fn enforcing_refuses_plaintext_and_disabled_refuses_tls() {
    let enforcing = Server::start(Some(server_tls(ServerTlsSettings {
        mode: TlsMode::Enforcing,
        ..ServerTlsSettings::default()
    })))
    .await;
    assert!(round_trip(&client(Some(any_server())), &enforcing).await);
    assert!(
        !round_trip(&client(None), &enforcing).await,
        "plaintext refused"
    );
    enforcing.shutdown().await;

    let disabled = Server::start(Some(server_tls(ServerTlsSettings {
        mode: TlsMode::Disabled,
        ..ServerTlsSettings::default()
    })))
    .await;
    assert!(round_trip(&client(None), &disabled).await);
    assert!(
        !round_trip(&client(Some(any_server())), &disabled).await,
        "TLS refused"
    );
    disabled.shutdown().await;
}

/// Reads until the server closes the connection; how long that took.
async fn closed_within(stream: &mut TcpStream, limit: Duration) -> Option<Duration> {
    let started = tokio::time::Instant::now();
    let mut sink = [0u8; 256];
    loop {
        match tokio::time::timeout_at(started + limit, stream.read(&mut sink)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(started.elapsed()),
            Ok(Ok(_)) => continue,
        }
    }
}

#[tokio::test]
async fn a_stalled_handshake_is_closed_after_the_handshake_timeout() {
    let timeout = Duration::from_millis(400);
    let server = Server::start(Some(server_tls(ServerTlsSettings {
        handshake_timeout: timeout,
        ..ServerTlsSettings::default()
    })))
    .await;
    // The start of a ClientHello record header, then nothing.
    let mut stalled = TcpStream::connect(server.addr).await.expect("connect");
    stalled.write_all(&[0x16, 0x03, 0x01]).await.expect("write");
    let took = closed_within(&mut stalled, WAIT).await;
    assert!(
        took.is_some_and(|took| took >= timeout),
        "closed after {took:?}"
    );
    // A client that never sends a byte is closed too.
    let mut silent = TcpStream::connect(server.addr).await.expect("connect");
    assert!(closed_within(&mut silent, WAIT).await.is_some());
    // Neither held anyone else up.
    assert!(round_trip(&client(Some(any_server())), &server).await);
    server.shutdown().await;
}

#[tokio::test]
async fn a_client_that_checks_refuses_a_wrong_or_expired_server_certificate() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (ours, theirs) = (
        Authority::new(dir.path(), "ours"),
        Authority::new(dir.path(), "theirs"),
    );
    let trusting_ours = ClientTlsSettings {
        trust: Some(ours.ca_file()),
        identity: None,
    };
    for (files, accepted) in [
        (ours.leaf("server", false), true),
        (theirs.leaf("server", false), false),
        (ours.leaf("expired", true), false),
    ] {
        let server = Server::start(Some(server_tls(ServerTlsSettings {
            mode: TlsMode::Enforcing,
            files: Some(files.clone()),
            ..ServerTlsSettings::default()
        })))
        .await;
        assert_eq!(
            round_trip(&client(Some(trusting_ours.clone())), &server).await,
            accepted,
            "{files:?}"
        );
        server.shutdown().await;
    }
}

#[tokio::test]
async fn a_server_that_requires_client_certificates_refuses_wrong_expired_and_missing_ones() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (ours, theirs) = (
        Authority::new(dir.path(), "ours"),
        Authority::new(dir.path(), "theirs"),
    );
    let server = Server::start(Some(server_tls(ServerTlsSettings {
        mode: TlsMode::Enforcing,
        files: Some(ours.leaf("server", false)),
        client_ca: Some(ours.ca_file()),
        ..ServerTlsSettings::default()
    })))
    .await;
    let presenting = |identity: Option<PemFiles>| {
        client(Some(ClientTlsSettings {
            trust: Some(ours.ca_file()),
            identity,
        }))
    };
    assert!(round_trip(&presenting(Some(ours.leaf("client", false))), &server).await);
    assert!(
        !round_trip(&presenting(None), &server).await,
        "no certificate"
    );
    assert!(
        !round_trip(&presenting(Some(theirs.leaf("client", false))), &server).await,
        "another CA's certificate"
    );
    assert!(
        !round_trip(&presenting(Some(ours.leaf("stale", true))), &server).await,
        "an expired certificate"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn changed_certificate_files_are_served_to_new_connections() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (first, second) = (
        Authority::new(dir.path(), "first"),
        Authority::new(dir.path(), "second"),
    );
    let files = first.leaf("server", false);
    let tls = server_tls(ServerTlsSettings {
        mode: TlsMode::Enforcing,
        files: Some(files.clone()),
        ..ServerTlsSettings::default()
    });
    let server = Server::start(Some(tls.clone())).await;
    let trusting = |authority: &Authority| {
        client(Some(ClientTlsSettings {
            trust: Some(authority.ca_file()),
            identity: None,
        }))
    };
    assert!(round_trip(&trusting(&first), &server).await);
    assert!(!tls.reload_if_changed().expect("nothing to reload"));

    // Modification times can be coarse: make sure the new files look changed.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let renewed = second.leaf("renewed", false);
    std::fs::copy(&renewed.certificate, &files.certificate).expect("replace certificate");
    std::fs::copy(&renewed.private_key, &files.private_key).expect("replace key");
    let bumped = std::time::SystemTime::now() + Duration::from_secs(1);
    for path in [&files.certificate, &files.private_key] {
        std::fs::File::options()
            .write(true)
            .open(path)
            .and_then(|file| file.set_modified(bumped))
            .expect("touch");
    }
    assert!(tls.reload_if_changed().expect("reloaded"));
    assert!(round_trip(&trusting(&second), &server).await);
    assert!(!round_trip(&trusting(&first), &server).await);

    // A broken key is refused and the certificate in force stays.
    std::fs::write(&files.private_key, "not a key").expect("break key");
    let later = bumped + Duration::from_secs(1);
    std::fs::File::options()
        .write(true)
        .open(&files.private_key)
        .and_then(|file| file.set_modified(later))
        .expect("touch");
    let refused = tls.reload_if_changed().err().map(|e| e.to_string());
    assert!(
        refused
            .as_deref()
            .is_some_and(|text| text.contains("private key")),
        "{refused:?}"
    );
    assert!(round_trip(&trusting(&second), &server).await);
    server.shutdown().await;
}
