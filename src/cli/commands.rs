//! The admin commands' arguments (clap), the connection options every command takes, and
//! the small helpers the command files share.

use clap::{Args, Subcommand};

/// Options every admin command takes.
#[derive(Debug, Clone, Args)]
pub struct Connection {
    /// A broker to start from, HOST:PORT (`--bootstrap-server` as in Kafka's tools)
    #[arg(
        long,
        short = 'b',
        visible_alias = "bootstrap-server",
        global = true,
        env = "TERN_BOOTSTRAP",
        default_value = "127.0.0.1:9092"
    )]
    pub bootstrap: String,
    /// Print JSON instead of a table
    #[arg(long, global = true)]
    pub json: bool,
    /// PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL, as the listener expects (security.protocol)
    #[arg(
        long,
        global = true,
        env = "TERN_SECURITY_PROTOCOL",
        default_value = "PLAINTEXT"
    )]
    pub security_protocol: String,
    /// PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (sasl.mechanism)
    #[arg(
        long,
        global = true,
        env = "TERN_SASL_MECHANISM",
        default_value = "SCRAM-SHA-512"
    )]
    pub sasl_mechanism: String,
    /// The user to log in as on a SASL listener (sasl.username)
    #[arg(long, global = true, env = "TERN_SASL_USERNAME")]
    pub sasl_username: Option<String>,
    /// File whose first line is that user's password; without it, the TERN_SASL_PASSWORD environment variable
    #[arg(long, global = true, env = "TERN_SASL_PASSWORD_FILE")]
    pub sasl_password_file: Option<std::path::PathBuf>,
    /// PEM CA certificates to verify the broker's certificate with (ssl.ca.location)
    #[arg(long, global = true, env = "TERN_SSL_CA")]
    pub ssl_ca: Option<std::path::PathBuf>,
    /// PEM client certificate, for an SSL listener that requires one (ssl.certificate.location)
    #[arg(long, global = true, env = "TERN_SSL_CERT", requires = "ssl_key")]
    pub ssl_cert: Option<std::path::PathBuf>,
    /// PEM private key of --ssl-cert (ssl.key.location)
    #[arg(long, global = true, env = "TERN_SSL_KEY", requires = "ssl_cert")]
    pub ssl_key: Option<std::path::PathBuf>,
}

impl Connection {
    /// The connection's security, as its flags describe it.
    pub fn security(&self) -> anyhow::Result<crate::client::ClientSecurity> {
        use crate::security::listener::SecurityProtocol;
        use crate::security::session::Mechanism;
        use anyhow::Context as _;

        let protocol: SecurityProtocol = self
            .security_protocol
            .parse()
            .map_err(|e| anyhow::anyhow!("--security-protocol: {e}"))?;
        let tls = match protocol.uses_tls() {
            false => None,
            true => {
                let ca = self.ssl_ca.as_deref().context(
                    "--security-protocol SSL/SASL_SSL needs --ssl-ca (the CA that signed the broker's certificate)",
                )?;
                let identity = self.ssl_cert.as_deref().zip(self.ssl_key.as_deref());
                Some(crate::security::tls::client_config(ca, identity)?)
            }
        };
        let sasl = match protocol.uses_sasl() {
            false => None,
            true => {
                let mechanism = Mechanism::from_name(&self.sasl_mechanism).with_context(|| {
                    format!(
                        "--sasl-mechanism {:?}: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512",
                        self.sasl_mechanism
                    )
                })?;
                let user = self
                    .sasl_username
                    .clone()
                    .context("a SASL listener needs --sasl-username")?;
                let password = match &self.sasl_password_file {
                    Some(file) => std::fs::read_to_string(file)
                        .with_context(|| format!("reading {}", file.display()))?
                        .lines()
                        .next()
                        .unwrap_or_default()
                        .to_string(),
                    None => std::env::var("TERN_SASL_PASSWORD").context(
                        "a SASL listener needs a password: --sasl-password-file or TERN_SASL_PASSWORD",
                    )?,
                };
                Some(crate::security::sasl_client::SaslLogin {
                    mechanism,
                    user,
                    password,
                })
            }
        };
        Ok(crate::client::ClientSecurity { tls, sasl })
    }
}

#[derive(Debug, Subcommand)]
pub enum TopicCommand {
    /// List topics with their partition counts
    List,
    /// Partitions (leader, replicas, ISR, offsets) and non-default configs of a topic
    Describe { name: String },
    /// Create a topic
    Create {
        name: String,
        /// Partitions (default: the broker's num.partitions)
        #[arg(long, default_value_t = -1)]
        partitions: i32,
        /// Replicas per partition (default: the broker's default.replication.factor)
        #[arg(long, default_value_t = -1)]
        replication_factor: i16,
        /// Topic config, KEY=VALUE (repeatable)
        #[arg(long = "config", value_name = "KEY=VALUE")]
        configs: Vec<String>,
    },
    /// Delete a topic
    Delete { name: String },
    /// Change topic configs: --set KEY=VALUE, --delete KEY (repeatable)
    AlterConfig {
        name: String,
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
        #[arg(long = "delete", value_name = "KEY")]
        delete: Vec<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum GroupCommand {
    /// List groups (classic, consumer and share) with their state
    List,
    /// Members, assignments, committed offsets (a share group's start offsets) and lag
    Describe { group: String },
    /// Delete an empty group with its offsets (DeleteGroups)
    Delete { group: String },
    /// A group's configs (consumer.session.timeout.ms, share.record.lock.duration.ms, …)
    /// with their values and where each comes from
    Configs { group: String },
    /// Change a group's configs: --set KEY=VALUE, --delete KEY (repeatable)
    AlterConfig {
        group: String,
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
        #[arg(long = "delete", value_name = "KEY")]
        delete: Vec<String>,
    },
    /// Move an empty group's offsets on a topic (a share group's start offsets)
    ResetOffsets {
        group: String,
        #[arg(long)]
        topic: String,
        /// To the log start
        #[arg(long, conflicts_with_all = ["to_latest", "to_offset"])]
        to_earliest: bool,
        /// To the log end
        #[arg(long, conflicts_with = "to_offset")]
        to_latest: bool,
        /// To this offset, on every partition
        #[arg(long)]
        to_offset: Option<i64>,
    },
}

/// `tern txn`: the jobs of Kafka's kafka-transactions.sh.
#[derive(Debug, Subcommand)]
pub enum TxnCommand {
    /// Transactional ids with their producer id and state, from every broker
    List,
    /// A transactional id's state at its coordinator
    Describe {
        #[arg(long)]
        transactional_id: String,
    },
    /// The producers a partition's leader knows, with their open transaction
    Producers {
        #[arg(long)]
        topic: String,
        #[arg(long)]
        partition: i32,
    },
    /// Abort the open transaction that starts at an offset of a partition (a hanging
    /// transaction), by writing its ABORT marker
    Abort {
        #[arg(long)]
        topic: String,
        #[arg(long)]
        partition: i32,
        #[arg(long)]
        start_offset: i64,
    },
    /// Open transactions older than the longest transaction timeout that no coordinator
    /// knows as open on their partition
    FindHanging {
        /// Only this topic (default: every topic)
        #[arg(long)]
        topic: Option<String>,
        /// transaction.max.timeout.ms of the cluster [default: 900000]
        #[arg(long, default_value_t = 900_000)]
        max_transaction_timeout_ms: i64,
    },
}

/// What an ACL command names, with `kafka-acls`' flags.
#[derive(Debug, Clone, Args)]
pub struct AclSelection {
    /// Principal granted (User:NAME; User:* for everyone), repeatable
    #[arg(long)]
    pub allow_principal: Vec<String>,
    /// Principal denied, repeatable
    #[arg(long)]
    pub deny_principal: Vec<String>,
    /// READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS,
    /// ALTER_CONFIGS, IDEMPOTENT_WRITE or ALL, repeatable
    #[arg(long)]
    pub operation: Vec<String>,
    #[arg(long)]
    pub topic: Option<String>,
    #[arg(long)]
    pub group: Option<String>,
    #[arg(long)]
    pub transactional_id: Option<String>,
    /// The cluster resource
    #[arg(long)]
    pub cluster: bool,
    /// LITERAL or PREFIXED [default: LITERAL]; for list also ANY and MATCH [default: ANY]
    #[arg(long)]
    pub resource_pattern_type: Option<String>,
    /// Client address the ACL applies to
    #[arg(long, default_value = "*")]
    pub host: String,
}

#[derive(Debug, Subcommand)]
pub enum AclCommand {
    /// Grant or deny operations on a resource (CreateAcls)
    Add(AclSelection),
    /// ACLs, all or those of a resource or principal (DescribeAcls)
    List(AclSelection),
    /// Remove exactly the ACLs named (DeleteAcls)
    Remove(AclSelection),
}

#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Create a user or set its password for one SCRAM mechanism (the password is
    /// prompted for, or read from stdin's first line)
    Add {
        name: String,
        /// SCRAM-SHA-256 or SCRAM-SHA-512
        #[arg(long, default_value = "SCRAM-SHA-512")]
        mechanism: String,
        /// PBKDF2 iterations, 4096 to 16384
        #[arg(long, default_value_t = 8192)]
        iterations: u32,
    },
    /// Users and their SCRAM mechanisms
    List,
    /// Remove a user's credential of one mechanism
    Remove {
        name: String,
        #[arg(long, default_value = "SCRAM-SHA-512")]
        mechanism: String,
    },
}

/// The entity a quota is for: a user, a client id, both, or an address; `<default>`
/// for the default entity of that type.
#[derive(Debug, Clone, Args)]
pub struct QuotaEntityArgs {
    /// The user (principal name), or <default>
    #[arg(long)]
    pub user: Option<String>,
    /// The client id, or <default>
    #[arg(long)]
    pub client_id: Option<String>,
    /// The client address (connection_creation_rate only), or <default>
    #[arg(long, conflicts_with_all = ["user", "client_id"])]
    pub ip: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum QuotaCommand {
    /// Set quota values of an entity (values not named are kept)
    Set {
        #[command(flatten)]
        entity: QuotaEntityArgs,
        /// Bytes per second the entity may produce
        #[arg(long)]
        producer_byte_rate: Option<u64>,
        /// Bytes per second the entity may fetch
        #[arg(long)]
        consumer_byte_rate: Option<u64>,
        /// Percent of one request-handling thread's time the entity may take
        #[arg(long)]
        request_percentage: Option<f64>,
        /// Partitions per second the entity may create or delete
        #[arg(long)]
        controller_mutation_rate: Option<f64>,
        /// New connections per second from the address (with --ip)
        #[arg(long)]
        connection_creation_rate: Option<u64>,
    },
    /// Quotas, all or those of the entity named
    List {
        #[command(flatten)]
        entity: QuotaEntityArgs,
    },
    /// Remove quota values of an entity: those named, or all of them
    Remove {
        #[command(flatten)]
        entity: QuotaEntityArgs,
        /// A quota key to remove (producer_byte_rate, ...); repeatable; none: all
        #[arg(long = "key")]
        keys: Vec<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Brokers, controller, partitions per broker, under-replicated partitions
    Describe,
}

/// Splits `KEY=VALUE`.
pub(super) fn key_value(raw: &str) -> anyhow::Result<(String, String)> {
    raw.split_once('=')
        .map(|(k, v)| (k.trim().to_string(), v.to_string()))
        .ok_or_else(|| anyhow::anyhow!("'{raw}' is not KEY=VALUE"))
}

/// Fails with the broker's message when `code` is an error.
pub(super) fn check(code: i16, message: Option<&str>, what: &str) -> anyhow::Result<()> {
    if code == 0 {
        return Ok(());
    }
    let name = kafka_protocol::ResponseError::try_from_code(code)
        .map(|e| format!("{e:?}"))
        .unwrap_or_else(|| format!("error {code}"));
    match message {
        Some(m) if !m.is_empty() => anyhow::bail!("{what}: {name}: {m}"),
        _ => anyhow::bail!("{what}: {name}"),
    }
}
