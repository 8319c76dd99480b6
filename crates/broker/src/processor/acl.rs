//! The ACL admin requests of RocketMQ 4.9 (mqadmin `updateAclConfig`, `deleteAclConfig`,
//! `updateGlobalWhiteAddr`, `clusterAclConfigVersion`): they change the broker's ACL file,
//! which then takes effect at once. Secrets arrive here and go only to the file.

use std::sync::Arc;

use tidemark_acl::{AccessControl, AccountUpdate};
use tidemark_protocol::json::{write, Object, ToJson, Value, WriteOptions};
use tidemark_protocol::{RemotingCommand, ResponseCode};
use tracing::info;

use super::{error, success};
use crate::state::BrokerState;

/// RocketMQ 4.9's failure codes (5.x gave these numbers other meanings).
const UPDATE_FAILED: i32 = 209;
const DELETE_FAILED: i32 = 210;
const WHITE_LIST_FAILED: i32 = 211;

fn acl_off() -> RemotingCommand {
    error(
        ResponseCode::SystemError,
        "ACL is not enabled on this broker (aclEnable = false)",
    )
}

fn failed(code: i32, reason: String) -> RemotingCommand {
    RemotingCommand::response(ResponseCode::from_i32(code), reason)
}

fn list(text: Option<&str>) -> Option<Vec<String>> {
    text.map(|text| {
        text.split(',')
            .map(str::trim)
            .filter(|part| !part.is_empty())
            .map(str::to_owned)
            .collect()
    })
}

/// Runs a change to the ACL file off the async threads.
async fn blocking<T: Send + 'static>(
    acl: &Arc<AccessControl>,
    change: impl FnOnce(&AccessControl) -> T + Send + 'static,
) -> Option<T> {
    let acl = acl.clone();
    tokio::task::spawn_blocking(move || change(&acl)).await.ok()
}

/// UPDATE_AND_CREATE_ACL_CONFIG.
pub(crate) async fn update_account(
    state: &BrokerState,
    request: &RemotingCommand,
) -> RemotingCommand {
    let Some(acl) = &state.security.acl else {
        return acl_off();
    };
    let field = |name: &str| request.ext_fields.get(name).map(str::to_owned);
    let Some(access_key) = field("accessKey").filter(|key| !key.is_empty()) else {
        return failed(UPDATE_FAILED, "accessKey is required".into());
    };
    let update = AccountUpdate {
        access_key: access_key.clone(),
        secret_key: field("secretKey").unwrap_or_default(),
        white_remote_address: field("whiteRemoteAddress"),
        // Java always sends it (a primitive boolean): an update without -m makes a normal account.
        admin: Some(field("admin").is_some_and(|admin| admin == "true")),
        default_topic_perm: field("defaultTopicPerm"),
        default_group_perm: field("defaultGroupPerm"),
        topic_perms: list(request.ext_fields.get("topicPerms")),
        group_perms: list(request.ext_fields.get("groupPerms")),
    };
    match blocking(acl, move |acl| acl.update_account(update)).await {
        Some(Ok(())) => {
            info!(%access_key, "ACL account created or updated");
            success()
        }
        Some(Err(failure)) => failed(UPDATE_FAILED, failure.to_string()),
        None => failed(UPDATE_FAILED, "the update did not finish".into()),
    }
}

/// DELETE_ACL_CONFIG.
pub(crate) async fn delete_account(
    state: &BrokerState,
    request: &RemotingCommand,
) -> RemotingCommand {
    let Some(acl) = &state.security.acl else {
        return acl_off();
    };
    let access_key = request
        .ext_fields
        .get("accessKey")
        .unwrap_or_default()
        .to_owned();
    let key = access_key.clone();
    match blocking(acl, move |acl| acl.delete_account(&key)).await {
        Some(Ok(true)) => {
            info!(%access_key, "ACL account deleted");
            success()
        }
        Some(Ok(false)) => failed(
            DELETE_FAILED,
            format!("The accesskey[{access_key}] corresponding to accessConfig has been deleted failed."),
        ),
        Some(Err(failure)) => failed(DELETE_FAILED, failure.to_string()),
        None => failed(DELETE_FAILED, "the deletion did not finish".into()),
    }
}

/// UPDATE_GLOBAL_WHITE_ADDRS_CONFIG (`aclFileFullPath` is not honoured: the broker has one file).
pub(crate) async fn update_global_white(
    state: &BrokerState,
    request: &RemotingCommand,
) -> RemotingCommand {
    let Some(acl) = &state.security.acl else {
        return acl_off();
    };
    let addresses = list(request.ext_fields.get("globalWhiteAddrs")).unwrap_or_default();
    match blocking(acl, move |acl| acl.update_global_white(&addresses)).await {
        Some(Ok(())) => {
            info!("ACL global white list replaced");
            success()
        }
        Some(Err(failure)) => failed(WHITE_LIST_FAILED, failure.to_string()),
        None => failed(WHITE_LIST_FAILED, "the update did not finish".into()),
    }
}

/// GET_BROKER_CLUSTER_ACL_INFO: the ACL file's version, per file as 4.9's tools expect.
pub(crate) fn acl_version(state: &BrokerState) -> RemotingCommand {
    let Some(acl) = &state.security.acl else {
        return acl_off();
    };
    let version = acl.version();
    let mut per_file = Object::new();
    per_file.push(
        Value::String(acl.file().display().to_string()),
        version.to_json(),
    );
    let options = WriteOptions::FASTJSON;
    let version = write(&version.to_json(), options);
    let mut response = success();
    let fields = &mut response.ext_fields;
    fields.insert("version", version.as_str());
    fields.insert(
        "allAclFileVersion",
        write(&Value::Object(per_file), options),
    );
    fields.insert("brokerName", state.config.broker_name.as_str());
    fields.insert("brokerAddr", state.config.broker_addr());
    fields.insert("clusterName", state.config.broker_cluster_name.as_str());
    response
}
