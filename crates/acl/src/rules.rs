//! The rules of `plain_acl.yml`: white-listed addresses and accounts with their permissions.

use std::collections::HashMap;

use yaml_rust2::{Yaml, YamlLoader};

use crate::address::AddressPattern;
use crate::perm::Perm;

/// RocketMQ refuses keys and secrets this short or shorter.
const KEY_LENGTH_MIN: usize = 7;

/// One account of the file.
#[derive(Clone, PartialEq, Eq)]
pub struct Account {
    pub access_key: String,
    pub(crate) secret_key: String,
    /// As written, for writing the file back.
    pub white_remote_address: String,
    pub(crate) white: AddressPattern,
    /// Admin accounts may use the admin request codes; without topic or group entries they may
    /// use every topic and group.
    pub admin: bool,
    pub default_topic_perm: Perm,
    pub default_group_perm: Perm,
    /// In file order (written back in the same order).
    pub topic_perms: Vec<(String, Perm)>,
    pub group_perms: Vec<(String, Perm)>,
}

impl std::fmt::Debug for Account {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Account")
            .field("access_key", &self.access_key)
            .field("admin", &self.admin)
            .finish_non_exhaustive()
    }
}

/// What an admin request asks to set for one account (UPDATE_AND_CREATE_ACL_CONFIG): fields
/// left `None` keep their current value, or their default for a new account.
#[derive(Clone, Default)]
pub struct AccountUpdate {
    pub access_key: String,
    pub secret_key: String,
    pub white_remote_address: Option<String>,
    pub admin: Option<bool>,
    pub default_topic_perm: Option<String>,
    pub default_group_perm: Option<String>,
    pub topic_perms: Option<Vec<String>>,
    pub group_perms: Option<Vec<String>>,
}

impl std::fmt::Debug for AccountUpdate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccountUpdate")
            .field("access_key", &self.access_key)
            .finish_non_exhaustive()
    }
}

impl Account {
    /// Whether the account may do `needed` with a topic (`group == false`) or a group.
    pub(crate) fn allows(&self, name: &str, group: bool, needed: Perm) -> bool {
        let (entries, default) = if group {
            (&self.group_perms, self.default_group_perm)
        } else {
            (&self.topic_perms, self.default_topic_perm)
        };
        match entries.iter().find(|(entry, _)| entry == name) {
            Some((_, owned)) => owned.allows(needed),
            None => default.allows(needed),
        }
    }

    /// RocketMQ lets an admin without any topic or group entry use everything.
    pub(crate) fn unrestricted(&self) -> bool {
        self.admin && self.topic_perms.is_empty() && self.group_perms.is_empty()
    }
}

/// A whole file, checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AclRules {
    /// As written, with their parsed forms.
    pub global_white: Vec<(String, AddressPattern)>,
    pub accounts: Vec<Account>,
    by_key: HashMap<String, usize>,
}

/// Why a file was refused: the message and, where it can be told, the line (1-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RulesError {
    pub line: Option<usize>,
    pub message: String,
}

impl std::fmt::Display for RulesError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            Some(line) => write!(f, "line {line}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl AclRules {
    pub fn account(&self, access_key: &str) -> Option<&Account> {
        self.by_key
            .get(access_key)
            .map(|&index| &self.accounts[index])
    }

    pub fn white_listed(&self, address: std::net::IpAddr) -> bool {
        self.global_white
            .iter()
            .any(|(_, pattern)| pattern.matches(address))
    }

    /// Parses and checks `plain_acl.yml`'s text.
    pub fn parse(text: &str) -> Result<AclRules, RulesError> {
        let documents = YamlLoader::load_from_str(text).map_err(|error| RulesError {
            line: Some(error.marker().line()),
            message: error.info().to_owned(),
        })?;
        let mut rules = AclRules::default();
        let Some(root) = documents.into_iter().next() else {
            return Ok(rules);
        };
        let at = |needle: &str| line_of(text, needle);
        let root =
            match root {
                Yaml::Hash(root) => root,
                Yaml::Null => return Ok(rules),
                _ => return Err(RulesError {
                    line: Some(1),
                    message:
                        "the file must be a mapping with globalWhiteRemoteAddresses and accounts"
                            .into(),
                }),
            };
        for (key, value) in root {
            let key = scalar(&key).unwrap_or_default();
            match key.as_str() {
                "globalWhiteRemoteAddresses" => {
                    for address in strings(&value, &key, at(&key))? {
                        let pattern =
                            AddressPattern::parse(&address).map_err(|message| RulesError {
                                line: at(&address),
                                message: format!("globalWhiteRemoteAddresses: {message}"),
                            })?;
                        rules.global_white.push((address, pattern));
                    }
                }
                "accounts" => match value {
                    Yaml::Array(accounts) => {
                        for account in accounts {
                            rules.add(parse_account(&account, text)?, text)?;
                        }
                    }
                    Yaml::Null => {}
                    _ => {
                        return Err(RulesError {
                            line: at("accounts"),
                            message: "accounts must be a list".into(),
                        })
                    }
                },
                // Written by RocketMQ's own updates, and read by its tools: not rules.
                "dataVersion" | "accessKey" | "secretKey" => {}
                other => {
                    return Err(RulesError {
                        line: at(other),
                        message: format!(
                            "unknown key '{other}' (expected globalWhiteRemoteAddresses, accounts)"
                        ),
                    })
                }
            }
        }
        Ok(rules)
    }

    fn add(&mut self, account: Account, text: &str) -> Result<(), RulesError> {
        if self.by_key.contains_key(&account.access_key) {
            return Err(RulesError {
                line: line_of(text, &account.access_key),
                message: format!("accessKey {} appears twice", account.access_key),
            });
        }
        self.by_key
            .insert(account.access_key.clone(), self.accounts.len());
        self.accounts.push(account);
        Ok(())
    }

    /// Applies an admin update: the new rules, or why the update is refused.
    pub fn with_update(&self, update: AccountUpdate) -> Result<AclRules, RulesError> {
        let current = self.account(&update.access_key);
        let mut account = match current {
            Some(account) => account.clone(),
            None => Account {
                access_key: update.access_key.clone(),
                secret_key: String::new(),
                white_remote_address: String::new(),
                white: AddressPattern::Nothing,
                admin: false,
                default_topic_perm: Perm::DENY,
                default_group_perm: Perm::DENY,
                topic_perms: Vec::new(),
                group_perms: Vec::new(),
            },
        };
        account.secret_key = update.secret_key;
        if let Some(address) = update.white_remote_address {
            account.white = AddressPattern::parse(&address).map_err(plain)?;
            account.white_remote_address = address;
        }
        if let Some(admin) = update.admin {
            account.admin = admin;
        }
        if let Some(perm) = update.default_topic_perm {
            account.default_topic_perm = parse_perm(&perm).map_err(plain)?;
        }
        if let Some(perm) = update.default_group_perm {
            account.default_group_perm = parse_perm(&perm).map_err(plain)?;
        }
        if let Some(entries) = update.topic_perms {
            account.topic_perms = parse_entries(&entries, "topicPerms").map_err(plain)?;
        }
        if let Some(entries) = update.group_perms {
            account.group_perms = parse_entries(&entries, "groupPerms").map_err(plain)?;
        }
        check_keys(&account.access_key, &account.secret_key).map_err(plain)?;
        let mut rules = self.clone();
        match rules.by_key.get(&account.access_key) {
            Some(&index) => rules.accounts[index] = account,
            None => rules.add(account, "")?,
        }
        Ok(rules)
    }

    /// The rules without `access_key`'s account; `None` if there is no such account.
    pub fn without(&self, access_key: &str) -> Option<AclRules> {
        self.by_key.get(access_key)?;
        let accounts = self
            .accounts
            .iter()
            .filter(|account| account.access_key != access_key)
            .cloned();
        let mut rules = AclRules {
            global_white: self.global_white.clone(),
            ..AclRules::default()
        };
        for account in accounts {
            rules
                .by_key
                .insert(account.access_key.clone(), rules.accounts.len());
            rules.accounts.push(account);
        }
        Some(rules)
    }

    /// The rules with a new global white list.
    pub fn with_global_white(&self, addresses: &[String]) -> Result<AclRules, RulesError> {
        let mut rules = self.clone();
        rules.global_white = addresses
            .iter()
            .map(|address| {
                AddressPattern::parse(address)
                    .map(|pattern| (address.clone(), pattern))
                    .map_err(plain)
            })
            .collect::<Result<_, _>>()?;
        Ok(rules)
    }

    /// The file's text for these rules (secrets included: the file is the secrets' home).
    pub fn to_yaml(&self) -> String {
        let mut out = String::from("globalWhiteRemoteAddresses:\n");
        for (address, _) in &self.global_white {
            out.push_str(&format!("  - {}\n", quoted(address)));
        }
        out.push_str("accounts:\n");
        for account in &self.accounts {
            out.push_str(&format!("  - accessKey: {}\n", quoted(&account.access_key)));
            out.push_str(&format!("    secretKey: {}\n", quoted(&account.secret_key)));
            out.push_str(&format!(
                "    whiteRemoteAddress: {}\n",
                quoted(&account.white_remote_address)
            ));
            out.push_str(&format!("    admin: {}\n", account.admin));
            out.push_str(&format!(
                "    defaultTopicPerm: {}\n",
                account.default_topic_perm
            ));
            out.push_str(&format!(
                "    defaultGroupPerm: {}\n",
                account.default_group_perm
            ));
            for (key, entries) in [
                ("topicPerms", &account.topic_perms),
                ("groupPerms", &account.group_perms),
            ] {
                out.push_str(&format!("    {key}:\n"));
                for (name, perm) in entries {
                    out.push_str(&format!("      - {}\n", quoted(&format!("{name}={perm}"))));
                }
            }
        }
        out
    }
}

fn plain(message: String) -> RulesError {
    RulesError {
        line: None,
        message,
    }
}

fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// The first line (1-based) containing `needle`, to point at what is wrong.
fn line_of(text: &str, needle: &str) -> Option<usize> {
    if needle.is_empty() {
        return None;
    }
    text.lines()
        .position(|line| line.contains(needle))
        .map(|index| index + 1)
}

fn scalar(value: &Yaml) -> Option<String> {
    match value {
        Yaml::String(text) | Yaml::Real(text) => Some(text.clone()),
        Yaml::Integer(number) => Some(number.to_string()),
        Yaml::Boolean(flag) => Some(flag.to_string()),
        Yaml::Null => Some(String::new()),
        _ => None,
    }
}

fn strings(value: &Yaml, key: &str, line: Option<usize>) -> Result<Vec<String>, RulesError> {
    match value {
        Yaml::Null => Ok(Vec::new()),
        Yaml::Array(items) => items
            .iter()
            .map(|item| {
                scalar(item).ok_or_else(|| RulesError {
                    line,
                    message: format!("{key}: every entry must be a plain value"),
                })
            })
            .collect(),
        other => scalar(other)
            .filter(|text| !text.is_empty())
            .map(|text| text.split(',').map(|part| part.trim().to_owned()).collect())
            .ok_or_else(|| RulesError {
                line,
                message: format!("{key} must be a list"),
            }),
    }
}

fn check_keys(access_key: &str, secret_key: &str) -> Result<(), String> {
    if access_key.chars().count() < KEY_LENGTH_MIN || secret_key.chars().count() < KEY_LENGTH_MIN {
        return Err(format!(
            "accessKey {access_key}: the access key and the secret key must both be longer than 6 characters"
        ));
    }
    Ok(())
}

fn parse_perm(text: &str) -> Result<Perm, String> {
    Perm::parse(text)
        .ok_or_else(|| format!("'{text}' is not a permission (expected DENY, PUB, SUB or PUB|SUB)"))
}

fn parse_entries(entries: &[String], key: &str) -> Result<Vec<(String, Perm)>, String> {
    entries
        .iter()
        .filter(|entry| !entry.trim().is_empty())
        .map(|entry| {
            let (name, perm) = entry
                .split_once('=')
                .filter(|(name, _)| !name.trim().is_empty())
                .ok_or_else(|| format!("{key}: '{entry}' is not name=PERM (e.g. topicA=SUB)"))?;
            let perm = parse_perm(perm).map_err(|message| format!("{key}: {message}"))?;
            Ok((name.trim().to_owned(), perm))
        })
        .collect()
}

fn parse_account(value: &Yaml, text: &str) -> Result<Account, RulesError> {
    let Yaml::Hash(fields) = value else {
        return Err(RulesError {
            line: line_of(text, "accounts"),
            message: "every account must be a mapping".into(),
        });
    };
    let field = |name: &str| fields.get(&Yaml::String(name.to_owned()));
    let access_key = field("accessKey").and_then(scalar).unwrap_or_default();
    // Errors about this account point at its accessKey line unless they can do better.
    let line =
        line_of(text, &format!("accessKey: {access_key}")).or_else(|| line_of(text, &access_key));
    let error = |message: String, near: Option<&str>| RulesError {
        line: near.and_then(|needle| line_of(text, needle)).or(line),
        message: format!("account {access_key}: {message}"),
    };
    for key in fields.keys() {
        let key = scalar(key).unwrap_or_default();
        if !matches!(
            key.as_str(),
            "accessKey"
                | "secretKey"
                | "whiteRemoteAddress"
                | "admin"
                | "defaultTopicPerm"
                | "defaultGroupPerm"
                | "topicPerms"
                | "groupPerms"
        ) {
            return Err(error(format!("unknown key '{key}'"), Some(&key)));
        }
    }
    let secret_key = field("secretKey").and_then(scalar).unwrap_or_default();
    check_keys(&access_key, &secret_key).map_err(|message| RulesError { line, message })?;
    let white_remote_address = field("whiteRemoteAddress")
        .and_then(scalar)
        .unwrap_or_default();
    let white = AddressPattern::parse(&white_remote_address)
        .map_err(|message| error(message, Some(&white_remote_address)))?;
    let admin = match field("admin") {
        None | Some(Yaml::Null) => false,
        Some(Yaml::Boolean(flag)) => *flag,
        Some(other) => match scalar(other).as_deref() {
            Some("true") => true,
            Some("false") => false,
            _ => return Err(error("admin must be true or false".into(), Some("admin"))),
        },
    };
    let perm = |name: &str| -> Result<Perm, RulesError> {
        match field(name).and_then(scalar).filter(|text| !text.is_empty()) {
            // RocketMQ's default when a permission is left out.
            None => Ok(Perm::DENY),
            Some(text) => parse_perm(&text)
                .map_err(|message| error(format!("{name}: {message}"), Some(&text))),
        }
    };
    let default_topic_perm = perm("defaultTopicPerm")?;
    let default_group_perm = perm("defaultGroupPerm")?;
    let entries = |name: &str| -> Result<Vec<(String, Perm)>, RulesError> {
        let listed = match field(name) {
            None => Vec::new(),
            Some(value) => strings(value, name, line_of(text, name))?,
        };
        parse_entries(&listed, name).map_err(|message| {
            let bad = listed
                .iter()
                .find(|entry| parse_entries(std::slice::from_ref(entry), name).is_err())
                .cloned()
                .unwrap_or_default();
            error(message, Some(&bad))
        })
    };
    Ok(Account {
        topic_perms: entries("topicPerms")?,
        group_perms: entries("groupPerms")?,
        access_key,
        secret_key,
        white_remote_address,
        white,
        admin,
        default_topic_perm,
        default_group_perm,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
globalWhiteRemoteAddresses:
  - 10.10.103.*
  - 192.168.0.*

accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
      - topicC=SUB
    groupPerms:
      # the group should convert to retry topic
      - groupA=DENY
      - groupB=PUB|SUB
      - groupC=SUB

  - accessKey: rocketmq2
    secretKey: 12345678
    whiteRemoteAddress: 192.168.1.*
    # if it is admin, it could access all resources
    admin: true
";

    #[test]
    fn rocketmqs_sample_file_parses() {
        let rules = AclRules::parse(SAMPLE);
        assert!(rules.is_ok(), "{rules:?}");
        let rules = rules.unwrap_or_default();
        assert_eq!(rules.global_white.len(), 2);
        let first = rules.account("RocketMQ");
        assert!(first.is_some());
        let Some(first) = first else { return };
        assert_eq!(first.secret_key, "12345678");
        assert!(!first.admin);
        assert!(first.allows("topicB", false, Perm::PUB));
        assert!(!first.allows("topicA", false, Perm::SUB));
        assert!(!first.allows("other", false, Perm::PUB));
        assert!(first.allows("other", true, Perm::SUB));
        assert!(!first.allows("groupA", true, Perm::SUB));
        let second = rules.account("rocketmq2");
        assert!(second.is_some_and(|account| account.admin && account.unrestricted()));
    }

    #[test]
    fn written_rules_read_back_the_same() {
        let rules = AclRules::parse(SAMPLE).unwrap_or_default();
        let again = AclRules::parse(&rules.to_yaml());
        assert_eq!(again, Ok(rules));
    }

    #[test]
    fn a_bad_file_names_its_line() {
        let bad_perm = SAMPLE.replace("topicC=SUB", "topicC=READ");
        let error = AclRules::parse(&bad_perm).err();
        assert_eq!(error.as_ref().and_then(|e| e.line), Some(15), "{error:?}");

        let short_secret = SAMPLE.replacen("secretKey: 12345678", "secretKey: 123", 1);
        let error = AclRules::parse(&short_secret).err();
        assert_eq!(error.as_ref().and_then(|e| e.line), Some(6), "{error:?}");

        let syntax = "accounts:\n  - accessKey: [unclosed\n";
        let error = AclRules::parse(syntax).err();
        assert!(error.as_ref().and_then(|e| e.line).is_some(), "{error:?}");

        let typo = SAMPLE.replace("defaultGroupPerm", "defaultGroupPerms");
        let error = AclRules::parse(&typo).err();
        assert_eq!(error.as_ref().and_then(|e| e.line), Some(11), "{error:?}");

        let twice = format!("{SAMPLE}  - accessKey: RocketMQ\n    secretKey: 87654321\n");
        assert!(AclRules::parse(&twice).is_err());
    }

    #[test]
    fn updates_replace_or_add_accounts() {
        let rules = AclRules::parse(SAMPLE).unwrap_or_default();
        let update = AccountUpdate {
            access_key: "newcomer".into(),
            secret_key: "newcomer-secret".into(),
            default_topic_perm: Some("PUB".into()),
            topic_perms: Some(vec!["orders=SUB".into()]),
            ..AccountUpdate::default()
        };
        let updated = rules.with_update(update).unwrap_or_default();
        let added = updated.account("newcomer");
        assert!(added.is_some_and(
            |a| a.allows("x", false, Perm::PUB) && !a.allows("orders", false, Perm::PUB)
        ));
        let removed = updated.without("RocketMQ").unwrap_or_default();
        assert!(removed.account("RocketMQ").is_none());
        assert!(removed.account("newcomer").is_some());
        let short = AccountUpdate {
            access_key: "tiny".into(),
            secret_key: "tiny".into(),
            ..AccountUpdate::default()
        };
        assert!(rules.with_update(short).is_err());
    }
}
