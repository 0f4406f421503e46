//! Settings given as flags or environment variables, over `proxy.toml`: what container users
//! set without writing a file. Precedence: flag > environment variable > file > default (clap
//! reads a flag before its variable; [`Override::apply`] puts either over the file).
//!
//! A bad value is reported naming the flag or variable it came from, and the key it sets.

use clap::parser::ValueSource;
use clap::{Arg, ArgMatches};

use super::{Config, ConfigError, LogFormat};

/// One setting that may be given as `--flag` or `KROUTE_...` instead of in the file.
#[derive(Debug)]
pub struct Setting {
    /// The flag, without its `--`.
    pub flag: &'static str,
    pub env: &'static str,
    /// The key of `proxy.toml` it sets.
    pub key: &'static str,
    help: &'static str,
    set: fn(&mut Config, &str) -> Result<(), String>,
}

/// Every setting that has a flag and an environment variable.
pub const SETTINGS: &[Setting] = &[
    Setting {
        flag: "bootstrap-servers",
        env: "KROUTE_BOOTSTRAP_SERVERS",
        key: "upstream.bootstrap_servers",
        help: "The real brokers, comma-separated host:port (upstream.bootstrap_servers)",
        set: |c, v| {
            c.upstream.bootstrap_servers = parse_list(v)?;
            Ok(())
        },
    },
    Setting {
        flag: "bind-host",
        env: "KROUTE_BIND_HOST",
        key: "listen.bind_host",
        help: "Interface the listeners bind to (listen.bind_host)",
        set: |c, v| {
            c.listen.bind_host = v.trim().to_string();
            Ok(())
        },
    },
    Setting {
        flag: "advertised-host",
        env: "KROUTE_ADVERTISED_HOST",
        key: "listen.advertised_host",
        help: "Host clients are told to dial (listen.advertised_host)",
        set: |c, v| {
            c.listen.advertised_host = v.trim().to_string();
            Ok(())
        },
    },
    Setting {
        flag: "bootstrap-port",
        env: "KROUTE_BOOTSTRAP_PORT",
        key: "listen.bootstrap_port",
        help: "Port clients bootstrap from (listen.bootstrap_port)",
        set: |c, v| {
            c.listen.bootstrap_port = parse_port(v)?;
            Ok(())
        },
    },
    Setting {
        flag: "broker-port-base",
        env: "KROUTE_BROKER_PORT_BASE",
        key: "listen.broker_port_base",
        help: "Broker N is served on this port + N (listen.broker_port_base)",
        set: |c, v| {
            c.listen.broker_port_base = parse_port(v)?;
            Ok(())
        },
    },
    Setting {
        flag: "admin-listen",
        env: "KROUTE_ADMIN_LISTEN",
        key: "admin.listen",
        help: "ip:port of /metrics, /health and /ready (admin.listen)",
        set: |c, v| {
            c.admin.listen = v.trim().to_string();
            Ok(())
        },
    },
    Setting {
        flag: "log-format",
        env: "KROUTE_LOG_FORMAT",
        key: "log.format",
        help: "text or json (log.format)",
        set: |c, v| {
            c.log.format = match v.trim() {
                "text" => LogFormat::Text,
                "json" => LogFormat::Json,
                other => return Err(format!("`{other}` is neither `text` nor `json`")),
            };
            Ok(())
        },
    },
    Setting {
        flag: "request-timeout-ms",
        env: "KROUTE_REQUEST_TIMEOUT_MS",
        key: "upstream.request_timeout_ms",
        help: "How long a broker may take to answer a request, 0: no limit (upstream.request_timeout_ms)",
        set: |c, v| {
            c.upstream.request_timeout_ms = v
                .trim()
                .parse()
                .map_err(|_| format!("`{v}` is not a number of milliseconds"))?;
            Ok(())
        },
    },
    Setting {
        flag: "drain-timeout-ms",
        env: "KROUTE_DRAIN_TIMEOUT_MS",
        key: "shutdown.drain_timeout_ms",
        help: "How long requests in flight may finish at shutdown (shutdown.drain_timeout_ms)",
        set: |c, v| {
            c.shutdown.drain_timeout_ms = v
                .trim()
                .parse()
                .map_err(|_| format!("`{v}` is not a number of milliseconds"))?;
            Ok(())
        },
    },
];

fn parse_list(v: &str) -> Result<Vec<String>, String> {
    let list: Vec<String> = v
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    if list.is_empty() {
        return Err("needs at least one host:port".into());
    }
    Ok(list)
}

fn parse_port(v: &str) -> Result<u16, String> {
    v.trim()
        .parse()
        .map_err(|_| format!("`{v}` is not a port number (0-65535)"))
}

/// A setting given on the command line or in the environment.
#[derive(Debug, Clone)]
pub struct Override {
    pub setting: &'static Setting,
    pub value: String,
    /// From the environment variable (else from the flag).
    pub from_env: bool,
}

impl Override {
    /// Where the value came from: `--flag` or `KROUTE_...`.
    pub fn source(&self) -> String {
        if self.from_env {
            self.setting.env.to_string()
        } else {
            format!("--{}", self.setting.flag)
        }
    }

    /// Puts the value into `config`, over what the file said.
    pub fn apply(&self, config: &mut Config) -> Result<(), ConfigError> {
        (self.setting.set)(config, &self.value).map_err(|problem| ConfigError::Override {
            source_name: self.source(),
            key: self.setting.key,
            problem,
        })
    }

    /// Looks a setting up by its key, e.g. in tests.
    pub fn new(key: &str, value: &str, from_env: bool) -> Option<Override> {
        let setting = SETTINGS.iter().find(|s| s.key == key)?;
        Some(Override {
            setting,
            value: value.to_string(),
            from_env,
        })
    }
}

/// The clap arguments of every setting, global so that they may follow a subcommand too.
pub fn args() -> Vec<Arg> {
    SETTINGS
        .iter()
        .map(|s| {
            Arg::new(s.flag)
                .long(s.flag)
                .env(s.env)
                .value_name("VALUE")
                .help(s.help)
                .global(true)
        })
        .collect()
}

/// The settings given in `matches` (parsed with [`args`]), flag or variable.
pub fn from_matches(matches: &ArgMatches) -> Vec<Override> {
    SETTINGS
        .iter()
        .filter_map(|setting| {
            let value = matches.get_one::<String>(setting.flag)?.clone();
            let from_env = matches.value_source(setting.flag) == Some(ValueSource::EnvVariable);
            Some(Override {
                setting,
                value,
                from_env,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ConfigFile, LogFormat};
    use crate::security::check_files;

    fn parse(argv: &[&str]) -> Vec<Override> {
        let command = clap::Command::new("kroute")
            .args(args())
            .subcommand(clap::Command::new("check-config"));
        from_matches(&command.try_get_matches_from(argv).unwrap())
    }

    fn effective(file: &str, overrides: &[Override]) -> Result<Config, ConfigError> {
        // Tests run in parallel: each call gets a file of its own (one named after the content
        // alone was removed by one test while another was reading it).
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("kroute-overrides-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{n}.toml"));
        std::fs::write(&path, file).unwrap();
        let loaded = Config::load_with(&ConfigFile::Given(path.clone()), overrides, check_files);
        let _ = std::fs::remove_file(path);
        loaded.map(|e| e.config)
    }

    const FILE: &str =
        "[listen]\nbootstrap_port = 9092\n[upstream]\nbootstrap_servers = [\"file:1\"]\n";

    #[test]
    fn flags_parse_before_or_after_a_subcommand() {
        let o = parse(&["kroute", "--bootstrap-servers", "a:1, b:2", "check-config"]);
        assert_eq!(o.len(), 1);
        assert_eq!(o[0].setting.key, "upstream.bootstrap_servers");
        assert_eq!(o[0].source(), "--bootstrap-servers");
        let o = parse(&["kroute", "check-config", "--log-format", "json"]);
        assert_eq!(o.len(), 1);
        assert_eq!(o[0].setting.key, "log.format");
    }

    #[test]
    fn every_setting_names_a_real_key_and_a_kroute_variable() {
        for s in SETTINGS {
            assert!(s.env.starts_with("KROUTE_"), "{}", s.env);
            assert_eq!(
                s.env,
                format!("KROUTE_{}", s.flag.replace('-', "_").to_uppercase())
            );
            // Applying a good value to the defaults changes the key it names.
            let good = match s.key {
                "upstream.bootstrap_servers" => "x:1",
                "log.format" => "json",
                "listen.bind_host" | "listen.advertised_host" => "10.0.0.1",
                "admin.listen" => "0.0.0.0:1",
                _ => "4242",
            };
            let mut c = defaults();
            let before = toml::to_string(&c).unwrap();
            Override::new(s.key, good, true)
                .unwrap()
                .apply(&mut c)
                .unwrap();
            let after = toml::to_string(&c).unwrap();
            assert_ne!(before, after, "{} changed nothing", s.key);
        }
    }

    #[test]
    fn overrides_go_over_the_file() {
        let o = [
            Override::new("upstream.bootstrap_servers", " a:1 ,b:2,", true).unwrap(),
            Override::new("listen.bootstrap_port", "19999", false).unwrap(),
            Override::new("log.format", "json", true).unwrap(),
            Override::new("shutdown.drain_timeout_ms", "2500", true).unwrap(),
            Override::new("upstream.request_timeout_ms", "0", false).unwrap(),
        ];
        let c = effective(FILE, &o).unwrap();
        assert_eq!(c.upstream.bootstrap_servers, ["a:1", "b:2"]);
        assert_eq!(c.listen.bootstrap_port, 19999);
        assert_eq!(c.log.format, LogFormat::Json);
        assert_eq!(c.shutdown.drain_timeout_ms, 2500);
        assert_eq!(c.request_timeout(), None);
        // Untouched keys keep the file's value or the default.
        let c = effective(FILE, &[]).unwrap();
        assert_eq!(c.upstream.bootstrap_servers, ["file:1"]);
        assert_eq!(c.shutdown.drain_timeout_ms, 10_000);
        assert_eq!(c.log.format, LogFormat::Text);
    }

    #[test]
    fn a_bad_override_names_its_variable_and_key() {
        let cases = [
            ("listen.bootstrap_port", "90000", "KROUTE_BOOTSTRAP_PORT"),
            ("listen.broker_port_base", "x", "KROUTE_BROKER_PORT_BASE"),
            ("log.format", "yaml", "KROUTE_LOG_FORMAT"),
            (
                "shutdown.drain_timeout_ms",
                "10s",
                "KROUTE_DRAIN_TIMEOUT_MS",
            ),
            (
                "upstream.bootstrap_servers",
                " , ",
                "KROUTE_BOOTSTRAP_SERVERS",
            ),
            // Wrong only once validated: still named by the variable.
            (
                "upstream.bootstrap_servers",
                "nohost",
                "KROUTE_BOOTSTRAP_SERVERS",
            ),
            ("admin.listen", "localhost", "KROUTE_ADMIN_LISTEN"),
            (
                "upstream.request_timeout_ms",
                "1m",
                "KROUTE_REQUEST_TIMEOUT_MS",
            ),
            (
                "upstream.request_timeout_ms",
                "10",
                "KROUTE_REQUEST_TIMEOUT_MS",
            ),
            ("listen.bind_host", " ", "KROUTE_BIND_HOST"),
            (
                "shutdown.drain_timeout_ms",
                "9999999",
                "KROUTE_DRAIN_TIMEOUT_MS",
            ),
        ];
        for (key, value, env) in cases {
            let err = effective(FILE, &[Override::new(key, value, true).unwrap()])
                .unwrap_err()
                .to_string();
            assert!(
                err.contains(env) && err.contains(key),
                "{key}={value}: {err}"
            );
        }
        let err = effective(FILE, &[Override::new("log.format", "xml", false).unwrap()])
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("--log-format"), "{err}");
    }

    #[test]
    fn the_default_file_may_be_absent_a_given_one_may_not() {
        let missing = std::env::temp_dir().join("kroute-no-such-dir/proxy.toml");
        let servers = [Override::new("upstream.bootstrap_servers", "a:1", true).unwrap()];
        let e = Config::load_with(&ConfigFile::Default(missing.clone()), &servers, check_files)
            .unwrap();
        assert_eq!(e.config.upstream.bootstrap_servers, ["a:1"]);
        assert!(e.file.is_none());
        // Without the servers, the error says how to give them.
        let err = Config::load_with(&ConfigFile::Default(missing.clone()), &[], check_files)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("upstream.bootstrap_servers") && err.contains("KROUTE_BOOTSTRAP_SERVERS"),
            "{err}"
        );
        let err = Config::load_with(&ConfigFile::Given(missing), &servers, check_files)
            .unwrap_err()
            .to_string();
        assert!(err.contains("cannot read"), "{err}");
    }

    /// The defaults, with a bootstrap server (the one key without a default).
    fn defaults() -> Config {
        let mut c: Config = toml::from_str("").unwrap();
        c.upstream.bootstrap_servers = vec!["d:1".into()];
        c
    }
}
