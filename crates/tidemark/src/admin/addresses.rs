//! The addresses an admin command is given, checked as clap parses them, and named by their flag
//! when the command cannot reach them: an operator reads which option to fix, not only which
//! socket failed.

use super::AdminCommand;

/// `host:port`, as `-b/--broker-addr` takes it.
pub fn host_port(text: &str) -> Result<String, String> {
    let (host, port) = text
        .trim()
        .rsplit_once(':')
        .ok_or_else(|| format!("{text:?} is not host:port"))?;
    if host.is_empty() {
        return Err(format!("{text:?} has no host before the port"));
    }
    match port.parse::<u16>() {
        Ok(port) if port > 0 => Ok(text.trim().to_owned()),
        _ => Err(format!("{port:?} in {text:?} is not a port (1-65535)")),
    }
}

/// `host:port[;host:port…]`, as `-n/--namesrv` takes it.
pub fn name_servers(text: &str) -> Result<String, String> {
    let mut count = 0;
    for addr in text
        .split(';')
        .map(str::trim)
        .filter(|addr| !addr.is_empty())
    {
        host_port(addr)?;
        count += 1;
    }
    if count == 0 {
        return Err("no name server address: give host:port[;host:port]".to_owned());
    }
    Ok(text.to_owned())
}

/// The addresses `command` was given, each with the flag that gave it.
pub fn given(command: &AdminCommand) -> Vec<(String, &'static str)> {
    use AdminCommand as C;
    let cluster = match command {
        C::SendMessage(args) => &args.cluster,
        C::ConsumeMessage(args) => &args.cluster,
        C::PopMessage(args) => &args.cluster,
        C::ConsumerProgress(args) => &args.cluster,
        C::TopicStatus(args) => &args.cluster,
        C::QueryMessage(args) => &args.cluster,
        C::ClusterList(args) => &args.cluster,
        C::ControllerStatus(args) => &args.cluster,
        C::BrokerStatus(args) => &args.cluster,
        C::BrokerConfig(super::cluster::BrokerConfigCommand::Get(args)) => &args.cluster,
        C::BrokerConfig(super::cluster::BrokerConfigCommand::Set(args)) => &args.cluster,
        C::TopicList(args) => &args.cluster,
        C::TopicRoute(args) => &args.cluster,
        C::TopicCreate(args) => &args.cluster,
        C::TopicDelete(args) => &args.cluster,
        C::GroupList(args) => &args.cluster,
        C::GroupCreate(args) => &args.cluster,
        C::GroupDelete(args) => &args.cluster,
        C::ConsumerConnection(args) => &args.cluster,
        C::ProducerConnection(args) => &args.cluster,
        C::ConsumerStatus(args) => &args.cluster,
        C::ResetOffsetByTime(args) => &args.cluster,
        C::SkipAccumulated(args) => &args.cluster,
        C::CloneOffset(args) => &args.cluster,
        C::ProgressHistory(args) => &args.cluster,
        C::ProgressRestore(args) => &args.cluster,
        C::DeadLetters(args) => &args.cluster,
        C::DeadLetterResend(args) => &args.cluster,
        C::RetryReplay(args) => &args.cluster,
    };
    let target = match command {
        C::BrokerStatus(args) => Some(&args.target),
        C::BrokerConfig(super::cluster::BrokerConfigCommand::Get(args)) => Some(&args.target),
        C::BrokerConfig(super::cluster::BrokerConfigCommand::Set(args)) => Some(&args.target),
        C::TopicCreate(args) => Some(&args.target),
        C::GroupList(args) => Some(&args.target),
        C::GroupCreate(args) => Some(&args.target),
        C::GroupDelete(args) => Some(&args.target),
        _ => None,
    };
    let mut given: Vec<(String, &'static str)> = cluster
        .namesrv
        .split(';')
        .map(str::trim)
        .filter(|addr| !addr.is_empty())
        .map(|addr| (addr.to_owned(), "-n/--namesrv"))
        .collect();
    if let Some(addr) = target.and_then(|target| target.broker_addr.as_ref()) {
        given.push((addr.clone(), "-b/--broker-addr"));
    }
    given
}

/// `error`, with the flag named when it is a failure to reach an address that flag gave.
pub fn name_the_flag(error: anyhow::Error, given: &[(String, &'static str)]) -> anyhow::Error {
    let text = format!("{error:#}");
    if !text.contains("connect") {
        return error;
    }
    match given.iter().find(|(addr, _)| text.contains(addr.as_str())) {
        Some((addr, flag)) => error.context(format!("{addr}, given by {flag}, cannot be reached")),
        None => error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_host_and_port() {
        assert!(host_port("127.0.0.1:9876").is_ok());
        assert!(host_port("broker-a.internal:10911").is_ok());
        assert!(host_port("nonsense").is_err());
        assert!(host_port(":9876").is_err());
        assert!(host_port("host:0").is_err());
        assert!(host_port("host:99999").is_err());
        assert!(name_servers("10.0.0.1:9876;10.0.0.2:9876").is_ok());
        assert!(name_servers("10.0.0.1:9876;oops").is_err());
        assert!(name_servers(" ; ").is_err());
    }

    #[test]
    fn a_connection_failure_names_the_flag_that_gave_the_address() {
        let given = vec![
            ("127.0.0.1:9".to_owned(), "-n/--namesrv"),
            ("127.0.0.1:10911".to_owned(), "-b/--broker-addr"),
        ];
        let named = name_the_flag(
            anyhow::anyhow!("cannot connect to 127.0.0.1:10911: refused"),
            &given,
        );
        assert!(
            format!("{named:#}").starts_with("127.0.0.1:10911, given by -b/--broker-addr"),
            "{named:#}"
        );
        let other = name_the_flag(anyhow::anyhow!("no such message"), &given);
        assert_eq!(format!("{other:#}"), "no such message");
    }
}
