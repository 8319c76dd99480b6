//! The command line as users type it: values that start with `-` (a time before now, a
//! negative number) reach the option they follow instead of being taken for a flag, and
//! `tidemark dev`'s optional ports count as asked for only when their flags are given. Each
//! test parses the real `tidemark` command; none starts a server.

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};

use crate::serve::ListenPort;
use crate::{Cli, Command};

/// The value `tidemark <line>` gives option `id` of the innermost subcommand; clap's error
/// otherwise.
fn value_of<T: Clone + Send + Sync + 'static>(line: &str, id: &str) -> Result<T, clap::Error> {
    let words = std::iter::once("tidemark").chain(line.split_whitespace());
    let mut matches = &Cli::command().try_get_matches_from(words)?;
    while let Some((_, inner)) = matches.subcommand() {
        matches = inner;
    }
    match matches.get_one::<T>(id) {
        Some(value) => Ok(value.clone()),
        None => panic!("`{line}` gave no value for {id}"),
    }
}

/// clap's error as the user would read it, for failure messages.
fn text<T>(parsed: Result<T, clap::Error>) -> Result<T, String> {
    parsed.map_err(|error| error.to_string())
}

/// A negative value the option parses and then refuses: the error names the option, where
/// clap would otherwise report an unknown flag `-1` and suggest `-- -1`.
fn assert_refused_by_option(line: &str, option: &str) {
    let words = std::iter::once("tidemark").chain(line.split_whitespace());
    match Cli::command().try_get_matches_from(words) {
        Err(error) => {
            assert_eq!(
                error.kind(),
                ErrorKind::ValueValidation,
                "`{line}`: {error}"
            );
            assert!(error.to_string().contains(option), "`{line}`: {error}");
        }
        Ok(_) => panic!("`{line}` was accepted"),
    }
}

const RESET: &str = "admin reset-offset-by-time -n 127.0.0.1:9876 -g G -t T";

#[test]
fn reset_offset_by_time_takes_the_readme_s_times_before_now() {
    for time in ["-90s", "-10m", "-2h", "-1d"] {
        let short = value_of::<String>(&format!("{RESET} -s {time}"), "timestamp");
        assert_eq!(text(short), Ok(time.to_owned()), "-s {time}");
        let long = value_of::<String>(&format!("{RESET} --timestamp {time} --json"), "timestamp");
        assert_eq!(text(long), Ok(time.to_owned()), "--timestamp {time}");
    }
}

#[test]
fn broker_config_set_passes_a_negative_value_to_the_broker() {
    let line = "admin broker-config set -n 127.0.0.1:9876 -b 127.0.0.1:10911 -k someKey -v -1";
    assert_eq!(text(value_of::<String>(line, "value")), Ok("-1".to_owned()));
}

#[test]
fn group_create_parses_a_negative_retry_max_times_for_its_own_range_check() {
    let line = "admin group-create -n 127.0.0.1:9876 -b 127.0.0.1:10911 -g G --retry-max-times -1";
    assert_eq!(text(value_of::<i32>(line, "retry_max_times")), Ok(-1));
}

#[test]
fn topic_create_parses_negative_queue_counts_and_perm_for_its_own_checks() {
    let base = "admin topic-create -n 127.0.0.1:9876 -b 127.0.0.1:10911 -t T";
    for (flag, id) in [
        ("-r", "read_queues"),
        ("-w", "write_queues"),
        ("-p", "perm"),
    ] {
        let parsed = value_of::<i32>(&format!("{base} {flag} -1"), id);
        assert_eq!(text(parsed), Ok(-1), "{flag} -1");
    }
}

#[test]
fn send_message_refuses_a_negative_delay_level_by_name() {
    assert_refused_by_option(
        "admin send-message -n 127.0.0.1:9876 -t T --delay-level -1",
        "--delay-level",
    );
}

#[test]
fn send_message_refuses_a_negative_deliver_at_ms_by_name() {
    assert_refused_by_option(
        "admin send-message -n 127.0.0.1:9876 -t T --deliver-at-ms -1",
        "--deliver-at-ms",
    );
}

#[test]
fn query_message_refuses_a_negative_max_by_name() {
    assert_refused_by_option(
        "admin query-message -n 127.0.0.1:9876 -t T -k K --max -1",
        "--max",
    );
}

#[test]
fn query_message_refuses_a_negative_queue_by_name() {
    assert_refused_by_option(
        "admin query-message -n 127.0.0.1:9876 -t T -b B -q -1 -o 0",
        "--queue",
    );
}

#[test]
fn query_message_refuses_a_negative_offset_by_name() {
    assert_refused_by_option(
        "admin query-message -n 127.0.0.1:9876 -t T -b B -q 0 -o -1",
        "--offset",
    );
}

#[test]
fn query_message_refuses_a_negative_trace_since_minutes_by_name() {
    assert_refused_by_option(
        "admin query-message -n 127.0.0.1:9876 --id X --trace --trace-since-minutes -5",
        "--trace-since-minutes",
    );
}

#[test]
fn bench_refuses_a_negative_queue_count_by_name() {
    assert_refused_by_option("bench produce --queues -1", "--queues");
}

/// `tidemark <line>`'s `dev` arguments.
fn dev_args(line: &str) -> crate::serve::DevArgs {
    let words = std::iter::once("tidemark").chain(line.split_whitespace());
    match Cli::try_parse_from(words) {
        Ok(Cli {
            command: Command::Dev(args),
        }) => args,
        other => panic!("`{line}`: {other:?}"),
    }
}

#[test]
fn dev_ports_are_asked_for_only_when_their_flags_are_given() {
    let defaults = dev_args("dev");
    assert_eq!(defaults.grpc_listen_port(), ListenPort::Default(8081));
    assert_eq!(defaults.http_listen_port(), ListenPort::Default(8082));
    // The default's own number, given on the command line, is asked for all the same.
    let given = dev_args("dev --grpc-port 8081 --http-port=8082");
    assert_eq!(given.grpc_listen_port(), ListenPort::Asked(8081));
    assert_eq!(given.http_listen_port(), ListenPort::Asked(8082));
    let off = dev_args("dev --grpc-port 0 --http-port 0");
    assert_eq!(off.grpc_listen_port(), ListenPort::Asked(0));
    assert_eq!(off.http_listen_port(), ListenPort::Asked(0));
}

#[test]
fn the_version_names_the_release_and_the_commit() {
    let version = Cli::command().render_version();
    assert!(
        version.starts_with(&format!("tidemark {} (commit ", env!("CARGO_PKG_VERSION"))),
        "{version}"
    );
    let commit = env!("TIDEMARK_COMMIT");
    assert!(!commit.is_empty() && version.contains(commit), "{version}");
}

#[test]
fn completions_and_man_pages_cover_the_commands() {
    let mut bash = Vec::new();
    clap_complete::generate(
        clap_complete::Shell::Bash,
        &mut Cli::command(),
        "tidemark",
        &mut bash,
    );
    let bash = String::from_utf8(bash).expect("utf-8");
    for word in ["dev", "admin", "reset-offset-by-time", "--namesrv-port"] {
        assert!(bash.contains(word), "bash completion lacks {word}");
    }

    let dir = std::env::temp_dir().join(format!("tidemark-man-{}", std::process::id()));
    crate::man_pages(&dir).expect("man pages written");
    let root = std::fs::read_to_string(dir.join("tidemark.1")).expect("tidemark.1");
    let reset = std::fs::read_to_string(dir.join("tidemark-admin-reset-offset-by-time.1"));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(root.contains(".TH tidemark 1"), "{root}");
    assert!(root.contains(env!("CARGO_PKG_VERSION")), "{root}");
    assert!(
        reset
            .expect("a page per subcommand")
            .contains("reset\\-offset\\-by\\-time"),
        "the subcommand's page names it"
    );
}

/// Every admin command an operator's script may read prints JSON with `--json`; the three that
/// stream messages print one JSON line per message always.
#[test]
fn every_admin_command_speaks_json() {
    const ALWAYS_JSON_LINES: [&str; 3] = ["send-message", "consume-message", "pop-message"];
    let cli = Cli::command();
    let admin = cli
        .get_subcommands()
        .find(|command| command.get_name() == "admin")
        .expect("an admin command");
    let mut leaves = Vec::new();
    for command in admin.get_subcommands() {
        if command.has_subcommands() {
            leaves.extend(command.get_subcommands().map(|inner| {
                (
                    format!("{} {}", command.get_name(), inner.get_name()),
                    inner,
                )
            }));
        } else {
            leaves.push((command.get_name().to_owned(), command));
        }
    }
    assert!(leaves.len() > 20, "the admin commands: {}", leaves.len());
    for (name, command) in leaves {
        let json = command
            .get_arguments()
            .any(|arg| arg.get_long() == Some("json"));
        assert!(
            json || ALWAYS_JSON_LINES.contains(&name.as_str()),
            "`tidemark admin {name}` has no --json"
        );
    }
}

#[test]
fn an_error_prints_each_cause_once() {
    let io = std::io::Error::other("Connection refused");
    let error = anyhow::Error::new(io)
        .context("cannot connect to 127.0.0.1:9: Connection refused")
        .context("127.0.0.1:9, given by -n/--namesrv, cannot be reached");
    assert_eq!(
        crate::error_text(&error),
        "127.0.0.1:9, given by -n/--namesrv, cannot be reached: cannot connect to 127.0.0.1:9: \
         Connection refused"
    );
}

#[test]
fn a_malformed_address_is_refused_by_its_flag() {
    for (line, flag) in [
        ("admin topic-list -n nonsense", "--namesrv"),
        ("admin broker-status -b 10.0.0.1", "--broker-addr"),
    ] {
        let words = std::iter::once("tidemark").chain(line.split_whitespace());
        let error = Cli::command()
            .try_get_matches_from(words)
            .expect_err("refused");
        assert_eq!(
            error.kind(),
            ErrorKind::ValueValidation,
            "`{line}`: {error}"
        );
        assert!(error.to_string().contains(flag), "`{line}`: {error}");
    }
}
