//! `tidemark-acl`: RocketMQ 4.x's ACL (the `acl` module's plain validator) for Tidemark's name
//! server and broker.
//!
//! An ACL file (`plain_acl.yml`) lists white-listed client addresses and accounts; each request
//! either comes from a white-listed address or names a known account (`AccessKey`) and carries
//! that account's signature (see [`tidemark_remoting::signing`]); then the topics and groups it
//! touches must be permitted to the account, and admin request codes need an admin account.
//! [`AclGuard`] puts the check in front of a server's handler; [`AccessControl`] owns the rules.

mod access;
mod address;
mod guard;
mod perm;
mod resources;
mod rules;

pub use access::{AccessControl, AclError, Principal};
pub use address::AddressPattern;
pub use guard::{watch_file, AclGuard};
pub use perm::Perm;
pub use resources::{admin_only, needed, Resource, Unreadable};
pub use rules::{Account, AccountUpdate, AclRules, RulesError};
