//! The decisions of an ACL file, checked the way a server makes them.

use std::net::IpAddr;
use std::path::PathBuf;

use proptest::prelude::*;
use tidemark_acl::{AccessControl, AccountUpdate};
use tidemark_protocol::headers::{PullMessageRequestHeader, SendMessageRequestHeaderV2};
use tidemark_protocol::{RemotingCommand, RequestCode};
use tidemark_remoting::Credentials;

const RULES: &str = "\
globalWhiteRemoteAddresses:
  - 10.0.0.*
accounts:
  - accessKey: alice-key
    secretKey: alice-secret
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - orders=PUB|SUB
      - audit=DENY
    groupPerms:
      - billing=SUB
  - accessKey: trusted-key
    secretKey: trusted-secret
    whiteRemoteAddress: 192.168.7.7
  - accessKey: admin-key
    secretKey: admin-secret
    admin: true
";

struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str, text: &str) -> TempFile {
        let path =
            std::env::temp_dir().join(format!("tidemark-acl-{}-{name}.yml", std::process::id()));
        std::fs::write(&path, text).expect("write the ACL file");
        TempFile(path)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        let _ = std::fs::remove_file(self.0.with_extension("yml.bak"));
    }
}

fn local() -> IpAddr {
    IpAddr::from([127, 0, 0, 1])
}

/// A SEND_MESSAGE_V2 as clients send it: every field of the short-form header.
fn send(topic: &str) -> RemotingCommand {
    let header = SendMessageRequestHeaderV2 {
        producer_group: "producers".into(),
        topic: topic.into(),
        default_topic: "TBW102".into(),
        default_topic_queue_nums: 4,
        queue_id: 0,
        sys_flag: 0,
        born_timestamp: 1,
        flag: 0,
        properties: None,
        reconsume_times: Some(0),
        unit_mode: false,
        max_reconsume_times: None,
        batch: false,
        broker_name: None,
    };
    RemotingCommand::request_with_header(RequestCode::SendMessageV2, &header).with_body("payload")
}

fn pull(topic: &str, group: &str) -> RemotingCommand {
    let header = PullMessageRequestHeader {
        consumer_group: group.into(),
        topic: topic.into(),
        queue_id: 0,
        queue_offset: 0,
        max_msg_nums: 32,
        sys_flag: 0,
        commit_offset: 0,
        suspend_timeout_millis: 0,
        subscription: Some("*".into()),
        sub_version: 0,
        expression_type: None,
        max_msg_bytes: None,
        broker_name: None,
    };
    RemotingCommand::request_with_header(RequestCode::PullMessage, &header)
}

fn signed(mut request: RemotingCommand, key: &str, secret: &str) -> RemotingCommand {
    Credentials::new(key, secret).sign(&mut request);
    request
}

#[test]
fn the_allowed_and_denied_matrix() {
    let file = TempFile::new("matrix", RULES);
    let acl = AccessControl::open(&file.0).expect("open");
    let alice = |request| signed(request, "alice-key", "alice-secret");
    let cases: Vec<(&str, RemotingCommand, IpAddr, Result<(), String>)> = vec![
        ("allowed send", alice(send("orders")), local(), Ok(())),
        (
            "allowed pull",
            alice(pull("orders", "billing")),
            local(),
            Ok(()),
        ),
        (
            "denied topic",
            alice(send("audit")),
            local(),
            Err("No default permission for topic:audit".into()),
        ),
        (
            "topic denied by default",
            alice(send("elsewhere")),
            local(),
            Err("No default permission for topic:elsewhere".into()),
        ),
        (
            "denied group",
            alice(pull("orders", "payroll")),
            local(),
            Err("No default permission for group:payroll".into()),
        ),
        (
            "retry send needs the group",
            alice(send("%RETRY%billing")),
            local(),
            Ok(()),
        ),
        (
            "wrong secret",
            signed(send("orders"), "alice-key", "not-the-secret"),
            local(),
            Err("Check signature failed for accessKey=alice-key".into()),
        ),
        (
            "unknown key",
            signed(send("orders"), "bob-key-123", "whatever-secret"),
            local(),
            Err("No acl config for bob-key-123".into()),
        ),
        (
            "no credentials",
            send("orders"),
            local(),
            Err("No accessKey is configured".into()),
        ),
        (
            "white-listed address",
            send("audit"),
            IpAddr::from([10, 0, 0, 9]),
            Ok(()),
        ),
        (
            "account's own address skips the signature",
            {
                let mut request = send("orders");
                request.ext_fields.insert("AccessKey", "trusted-key");
                request
            },
            IpAddr::from([192, 168, 7, 7]),
            Ok(()),
        ),
        (
            "admin code for a normal account",
            alice(RemotingCommand::request(RequestCode::UpdateAndCreateTopic)),
            local(),
            Err("Need admin permission for request code=17, but accessKey=alice-key is not".into()),
        ),
        (
            "a master's POP state for a normal account",
            alice(RemotingCommand::request(RequestCode::GetAllPopState)),
            local(),
            Err(
                "Need admin permission for request code=31002, but accessKey=alice-key is not"
                    .into(),
            ),
        ),
        (
            "admin code for an admin",
            signed(
                RemotingCommand::request(RequestCode::UpdateAndCreateTopic),
                "admin-key",
                "admin-secret",
            ),
            local(),
            Ok(()),
        ),
        (
            "admin uses any topic",
            signed(send("audit"), "admin-key", "admin-secret"),
            local(),
            Ok(()),
        ),
        (
            "trace topic always",
            alice(send("RMQ_SYS_TRACE_TOPIC")),
            local(),
            Ok(()),
        ),
        (
            "empty C++ fields are no credentials",
            {
                let mut request = send("orders");
                request.ext_fields.insert("AccessKey", "");
                request.ext_fields.insert("Signature", "");
                request
            },
            local(),
            Err("No accessKey is configured".into()),
        ),
    ];
    for (name, request, peer, expected) in cases {
        assert_eq!(acl.check(&request, peer), expected, "{name}");
    }
    assert_eq!(acl.refusals(), 9);
}

#[test]
fn a_body_changed_after_signing_is_refused() {
    let file = TempFile::new("body", RULES);
    let acl = AccessControl::open(&file.0).expect("open");
    let mut request = signed(send("orders"), "alice-key", "alice-secret");
    request.body = bytes_of("another payload");
    assert_eq!(
        acl.check(&request, local()),
        Err("Check signature failed for accessKey=alice-key".into())
    );
}

fn bytes_of(text: &'static str) -> bytes::Bytes {
    bytes::Bytes::from_static(text.as_bytes())
}

#[test]
fn a_changed_file_takes_effect_and_a_broken_one_keeps_the_old_rules() {
    let file = TempFile::new("reload", RULES);
    let acl = AccessControl::open(&file.0).expect("open");
    let before = acl.version().counter;
    assert!(acl.check(&send("orders"), local()).is_err());

    std::fs::write(
        &file.0,
        RULES.replace("  - 10.0.0.*", "  - 10.0.0.*\n  - 127.0.0.1"),
    )
    .expect("rewrite");
    assert!(matches!(acl.reload_if_changed(), Ok(true)));
    assert_eq!(acl.check(&send("orders"), local()), Ok(()));
    assert!(acl.version().counter > before);
    assert!(matches!(acl.reload_if_changed(), Ok(false)));

    std::fs::write(
        &file.0,
        "accounts:\n  - accessKey: short\n    secretKey: x\n",
    )
    .expect("rewrite");
    let refused = acl.reload_if_changed();
    let message = refused.map_err(|e| e.to_string()).err().unwrap_or_default();
    assert!(message.contains("line 2"), "{message}");
    assert_eq!(
        acl.check(&send("orders"), local()),
        Ok(()),
        "old rules stay in force"
    );
}

#[test]
fn admin_updates_are_written_and_take_effect() {
    let file = TempFile::new("update", RULES);
    let acl = AccessControl::open(&file.0).expect("open");
    acl.update_account(AccountUpdate {
        access_key: "carol-key".into(),
        secret_key: "carol-secret".into(),
        default_topic_perm: Some("PUB".into()),
        ..AccountUpdate::default()
    })
    .expect("update");
    assert_eq!(
        acl.check(
            &signed(send("anything"), "carol-key", "carol-secret"),
            local()
        ),
        Ok(())
    );
    let written = std::fs::read_to_string(&file.0).expect("read back");
    assert!(written.contains("carol-key"));
    // A fresh reader of the file sees the same rules.
    let reopened = AccessControl::open(&file.0).expect("reopen");
    assert_eq!(
        reopened.check(
            &signed(send("anything"), "carol-key", "carol-secret"),
            local()
        ),
        Ok(())
    );

    assert!(matches!(acl.delete_account("carol-key"), Ok(true)));
    assert!(matches!(acl.delete_account("carol-key"), Ok(false)));
    assert_eq!(
        acl.check(
            &signed(send("anything"), "carol-key", "carol-secret"),
            local()
        ),
        Err("No acl config for carol-key".into())
    );
    acl.update_global_white(&["127.0.0.*".into()])
        .expect("white list");
    assert_eq!(acl.check(&send("anything"), local()), Ok(()));
    assert!(acl.update_global_white(&["not-an-address".into()]).is_err());
}

#[test]
fn an_oversized_access_key_is_refused_without_being_echoed_whole() {
    let file = TempFile::new("oversized", RULES);
    let acl = AccessControl::open(&file.0).expect("open");
    let huge = "k".repeat(1 << 20);
    let mut request = send("orders");
    request.ext_fields.insert("AccessKey", huge.as_str());
    request.ext_fields.insert("Signature", "s".repeat(1 << 16));
    let refusal = acl.check(&request, local()).err().unwrap_or_default();
    assert!(
        refusal.starts_with("No acl config for kkkk"),
        "{refusal:.100}"
    );
    assert!(refusal.len() < 300, "{} bytes", refusal.len());
    assert!(refusal.ends_with("(1048576 bytes)"));
}

#[test]
fn secrets_never_show_in_a_debug_print_of_a_request() {
    let mut request = RemotingCommand::request(RequestCode::UpdateAndCreateAclConfig);
    request.ext_fields.insert("accessKey", "carol-key");
    request.ext_fields.insert("secretKey", "carol-secret");
    let printed = format!("{request:?}");
    assert!(
        printed.contains("carol-key") && !printed.contains("carol-secret"),
        "{printed}"
    );
    let signed = signed(send("orders"), "alice-key", "alice-secret");
    let signature = signed
        .ext_fields
        .get("Signature")
        .unwrap_or_default()
        .to_owned();
    assert!(!format!("{signed:?}").contains(&signature));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Whatever the fields and signature, checking never panics, and a request is let through
    /// only when it is signed with the account's secret.
    #[test]
    fn arbitrary_credentials_never_pass_or_panic(
        fields in proptest::collection::vec(("[A-Za-z]{1,12}", ".{0,40}"), 0..8),
        key in prop_oneof![Just("alice-key".to_owned()), ".{0,300}"],
        signature in ".{0,200}",
        body in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let file = TempFile::new("fuzz", RULES);
        let acl = AccessControl::open(&file.0).expect("open");
        let mut request = send("orders");
        for (name, value) in fields {
            request.ext_fields.insert(name, value);
        }
        request.body = body.into();
        request.ext_fields.insert("AccessKey", key);
        request.ext_fields.insert("Signature", signature);
        prop_assert!(acl.check(&request, local()).is_err());
    }
}
