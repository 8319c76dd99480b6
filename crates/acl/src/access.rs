//! [`AccessControl`]: the rules in force, the checks every request goes through, and the
//! changes to the rules (file reloads and admin updates).

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use thiserror::Error;
use tidemark_protocol::body::DataVersion;
use tidemark_protocol::{RemotingCommand, RequestCode};
use tidemark_remoting::now_ms;
use tidemark_remoting::signing::{signature_matches, signed_content, ACCESS_KEY, SIGNATURE};
use tidemark_storage::atomic_file::{write_atomically, PersistError};
use tidemark_storage::io::FsStorage;
use tracing::warn;

use crate::address::canonical;
use crate::perm::Perm;
use crate::resources::{admin_only, needed, Resource};
use crate::rules::{AccountUpdate, AclRules, RulesError};

/// RocketMQ's message-trace topic: sends to it are let through whatever the account's topic
/// permissions say, so tracing never makes a permitted send fail.
const TRACE_TOPIC: &str = "RMQ_SYS_TRACE_TOPIC";

#[derive(Debug, Error)]
pub enum AclError {
    #[error("cannot read the ACL file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("ACL file {path} refused: {error}")]
    Invalid { path: PathBuf, error: RulesError },
    #[error("ACL change refused: {0}")]
    Update(RulesError),
    #[error("ACL file {path} not written: {source}")]
    Write { path: PathBuf, source: PersistError },
}

/// Who a request comes from, once authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// A white-listed address (globally, or the account's own): permissions are not checked.
    WhiteListed,
    /// An account whose signature matched.
    Account(String),
}

/// The rules in force and the text they came from.
#[derive(Debug)]
struct Snapshot {
    rules: AclRules,
    version: DataVersion,
    text: String,
}

/// The rules of one ACL file and the checks made with them.
///
/// Invariants: the rules in force are always those of the last file text that parsed (a file
/// that does not parse leaves them as they were); every change raises the version's counter;
/// changes (reloads and admin updates) happen one at a time, under `changing`. Checks read a
/// snapshot and never wait for a change to finish writing the file.
#[derive(Debug)]
pub struct AccessControl {
    file: PathBuf,
    current: RwLock<Arc<Snapshot>>,
    changing: Mutex<()>,
    refused: AtomicU64,
    last_refusal_logged_ms: AtomicI64,
}

impl AccessControl {
    /// Reads and checks `file`. Blocking.
    pub fn open(file: impl Into<PathBuf>) -> Result<AccessControl, AclError> {
        let file = file.into();
        let text = read(&file)?;
        let rules = AclRules::parse(&text).map_err(|error| AclError::Invalid {
            path: file.clone(),
            error,
        })?;
        Ok(AccessControl {
            current: RwLock::new(Arc::new(Snapshot {
                rules,
                version: DataVersion {
                    counter: 0,
                    timestamp: now_ms(),
                    state_version: None,
                },
                text,
            })),
            file,
            changing: Mutex::new(()),
            refused: AtomicU64::new(0),
            last_refusal_logged_ms: AtomicI64::new(0),
        })
    }

    pub fn file(&self) -> &Path {
        &self.file
    }

    pub fn version(&self) -> DataVersion {
        self.snapshot().version.clone()
    }

    /// Requests refused since start.
    pub fn refusals(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    fn snapshot(&self) -> Arc<Snapshot> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Whether `request` from `peer` may be served; the refusal's text otherwise, worded as
    /// RocketMQ words it.
    pub fn check(&self, request: &RemotingCommand, peer: IpAddr) -> Result<(), String> {
        let outcome = self
            .principal(request, peer)
            .and_then(|principal| match principal {
                // Nothing is checked for a white-listed address, so nothing needs reading.
                Principal::WhiteListed => Ok(()),
                Principal::Account(_) => {
                    let needs = needed(request).map_err(|unreadable| unreadable.to_string())?;
                    self.authorize(&principal, request.request_code(), &needs)
                }
            });
        self.count(&outcome, peer, request.request_code());
        outcome
    }

    /// Who signed `request` from `peer`, found as [`check`](Self::check) finds it but neither
    /// counted nor checked against permissions: for records of who did what.
    pub fn principal(&self, request: &RemotingCommand, peer: IpAddr) -> Result<Principal, String> {
        let access_key = request.ext_fields.get(ACCESS_KEY);
        self.authenticate(peer, access_key, |secret| {
            let signature = request.ext_fields.get(SIGNATURE).unwrap_or_default();
            signature_matches(&signed_content(request), secret, signature)
        })
    }

    /// Who is asking: a white-listed address (then nothing else is checked), or an account
    /// whose signature `signature_matches` (given the account's secret) confirmed. The C++
    /// client always sends the key field, empty when it has no credentials.
    pub fn authenticate(
        &self,
        peer: IpAddr,
        access_key: Option<&str>,
        signature_matches: impl FnOnce(&str) -> bool,
    ) -> Result<Principal, String> {
        let peer = canonical(peer);
        let snapshot = self.snapshot();
        let rules = &snapshot.rules;
        if rules.white_listed(peer) {
            return Ok(Principal::WhiteListed);
        }
        let Some(access_key) = access_key.filter(|key| !key.is_empty()) else {
            return Err("No accessKey is configured".to_owned());
        };
        let Some(account) = rules.account(access_key) else {
            return Err(format!("No acl config for {}", shown_key(access_key)));
        };
        if account.white.matches(peer) {
            return Ok(Principal::WhiteListed);
        }
        if !signature_matches(&account.secret_key) {
            return Err(format!("Check signature failed for accessKey={access_key}"));
        }
        Ok(Principal::Account(access_key.to_owned()))
    }

    /// Whether `principal` may send `code` touching `needs`.
    pub fn authorize(
        &self,
        principal: &Principal,
        code: RequestCode,
        needs: &[(Resource, Perm)],
    ) -> Result<(), String> {
        let Principal::Account(access_key) = principal else {
            return Ok(());
        };
        let snapshot = self.snapshot();
        // Removed since it was authenticated (a reload in between): as if never known.
        let Some(account) = snapshot.rules.account(access_key) else {
            return Err(format!("No acl config for {access_key}"));
        };
        if needs.iter().any(|(resource, perm)| {
            *perm == Perm::PUB && *resource == Resource::Topic(TRACE_TOPIC.into())
        }) {
            return Ok(());
        }
        if admin_only(code) && !account.admin {
            return Err(format!(
                "Need admin permission for request code={}, but accessKey={access_key} is not",
                code.to_i32()
            ));
        }
        if account.unrestricted() {
            return Ok(());
        }
        for (resource, perm) in needs {
            let allowed = match resource {
                Resource::Topic(name) => account.allows(name, false, *perm),
                Resource::Group(name) => account.allows(name, true, *perm),
            };
            if !allowed {
                return Err(format!("No default permission for {}", resource.describe()));
            }
        }
        Ok(())
    }

    /// Counts a refusal and logs it, at most one line a second (a client retrying with a bad
    /// secret must not flood the log).
    pub fn count<T>(&self, outcome: &Result<T, String>, peer: IpAddr, code: RequestCode) {
        let Err(reason) = outcome else { return };
        self.refused.fetch_add(1, Ordering::Relaxed);
        let now = now_ms();
        let last = self.last_refusal_logged_ms.load(Ordering::Relaxed);
        if now - last >= 1000
            && self
                .last_refusal_logged_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            warn!(%peer, %code, %reason, refused = self.refusals(), "request refused by ACL");
        }
    }

    /// Re-reads the file; applies it when its text changed. `Ok(true)` when new rules are in
    /// force; an error (the rules stay as they were) when the file cannot be read or is wrong.
    /// Blocking.
    pub fn reload_if_changed(&self) -> Result<bool, AclError> {
        let _changing = self.changing.lock().unwrap_or_else(PoisonError::into_inner);
        let text = read(&self.file)?;
        let current = self.snapshot();
        if text == current.text {
            return Ok(false);
        }
        let rules = AclRules::parse(&text).map_err(|error| AclError::Invalid {
            path: self.file.clone(),
            error,
        })?;
        self.install(&current, rules, text);
        Ok(true)
    }

    /// Creates or replaces one account, in the file and in force. Blocking.
    pub fn update_account(&self, update: AccountUpdate) -> Result<(), AclError> {
        self.change(|rules| rules.with_update(update).map(Some))
            .map(|_| ())
    }

    /// Removes an account; `false` when there was none. Blocking.
    pub fn delete_account(&self, access_key: &str) -> Result<bool, AclError> {
        self.change(|rules| Ok(rules.without(access_key)))
    }

    /// Replaces the global white list. Blocking.
    pub fn update_global_white(&self, addresses: &[String]) -> Result<(), AclError> {
        self.change(|rules| rules.with_global_white(addresses).map(Some))
            .map(|_| ())
    }

    fn change(
        &self,
        edit: impl FnOnce(&AclRules) -> Result<Option<AclRules>, RulesError>,
    ) -> Result<bool, AclError> {
        let _changing = self.changing.lock().unwrap_or_else(PoisonError::into_inner);
        let current = self.snapshot();
        let Some(rules) = edit(&current.rules).map_err(AclError::Update)? else {
            return Ok(false);
        };
        let text = rules.to_yaml();
        write_atomically(&FsStorage, &self.file, text.as_bytes(), false).map_err(|source| {
            AclError::Write {
                path: self.file.clone(),
                source,
            }
        })?;
        self.install(&current, rules, text);
        Ok(true)
    }

    fn install(&self, current: &Snapshot, rules: AclRules, text: String) {
        let snapshot = Arc::new(Snapshot {
            rules,
            version: current.version.next(now_ms()),
            text,
        });
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = snapshot;
    }
}

/// An access key as a refusal names it: a key longer than any real one is cut, so a client
/// cannot make the server echo (and log) a megabyte.
fn shown_key(access_key: &str) -> String {
    const SHOWN_MAX: usize = 128;
    if access_key.len() <= SHOWN_MAX {
        return access_key.to_owned();
    }
    let mut end = SHOWN_MAX;
    while !access_key.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &access_key[..end], access_key.len())
}

fn read(file: &Path) -> Result<String, AclError> {
    std::fs::read_to_string(file).map_err(|source| AclError::Read {
        path: file.to_owned(),
        source,
    })
}
