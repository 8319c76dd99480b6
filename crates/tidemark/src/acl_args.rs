//! ACL flags shared by the servers that check requests and sign their own (`dev`,
//! `controller`), and opening the ACL file they name.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use tidemark_acl::AccessControl;

#[derive(Debug, Args)]
pub struct ServerAclArgs {
    /// Check every request against this ACL file (RocketMQ's `plain_acl.yml`), re-read when it
    /// changes; without it every port runs open. Needs --acl-access-key.
    #[arg(long, requires = "acl_access_key")]
    pub acl_file: Option<PathBuf>,
    /// With --acl-file: the admin account of that file this process signs its own requests
    /// with (a broker registering with the name server; a controller's Raft traffic and its
    /// role-change notices to brokers).
    #[arg(long, requires_all = ["acl_file", "acl_secret_key"])]
    pub acl_access_key: Option<String>,
    #[arg(long, requires = "acl_access_key")]
    pub acl_secret_key: Option<String>,
}

impl ServerAclArgs {
    /// The account to sign with, when both halves were given.
    pub fn account(&self) -> Option<(&str, &str)> {
        self.acl_access_key
            .as_deref()
            .zip(self.acl_secret_key.as_deref())
    }
}

/// Reads the ACL file off the async runtime; `None` runs open.
pub(crate) async fn open_acl(file: Option<PathBuf>) -> anyhow::Result<Option<Arc<AccessControl>>> {
    let Some(file) = file else { return Ok(None) };
    let opened = tokio::task::spawn_blocking(move || AccessControl::open(file))
        .await
        .context("ACL task")??;
    Ok(Some(Arc::new(opened)))
}
