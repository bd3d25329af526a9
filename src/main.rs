//! The `tern` command: `tern serve` runs a broker until SIGTERM or SIGINT.

use anyhow::Context;
use clap::{Parser, Subcommand};
use tern::broker::Broker;
use tern::cli::{
    AclCommand, ArchiveCommand, ArchiveLocation, ClusterCommand, Connection, GroupCommand,
    QuotaCommand, TopicCommand, TxnCommand, UserCommand,
};
use tern::config::{Config, ServeArgs};

#[derive(Debug, Parser)]
#[command(
    name = "tern",
    version,
    about = "A Kafka-wire-compatible message broker"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a broker. Every option can also be set as TERN_<NAME> or in the --config file.
    Serve(Box<ServeArgs>),
    /// Topic administration through the Kafka protocol (any broker)
    Topic {
        #[command(flatten)]
        connection: Connection,
        #[command(subcommand)]
        command: TopicCommand,
    },
    /// Consumer groups through the Kafka protocol (any broker)
    Group {
        #[command(flatten)]
        connection: Connection,
        #[command(subcommand)]
        command: GroupCommand,
    },
    /// Transactions through the Kafka protocol: list, describe, producers, abort,
    /// find-hanging (the jobs of kafka-transactions.sh)
    Txn {
        #[command(flatten)]
        connection: Connection,
        #[command(subcommand)]
        command: TxnCommand,
    },
    /// ACLs through the Kafka protocol (CreateAcls, DescribeAcls, DeleteAcls)
    Acl {
        #[command(flatten)]
        connection: Connection,
        #[command(subcommand)]
        command: AclCommand,
    },
    /// SCRAM users through the Kafka protocol (AlterUserScramCredentials)
    User {
        #[command(flatten)]
        connection: Connection,
        #[command(subcommand)]
        command: UserCommand,
    },
    /// Client quotas through the Kafka protocol (AlterClientQuotas, DescribeClientQuotas)
    Quota {
        #[command(flatten)]
        connection: Connection,
        #[command(subcommand)]
        command: QuotaCommand,
    },
    /// The Parquet archive, read from its store (--archive-dir / --archive-url);
    /// restore produces through the Kafka protocol
    Archive {
        #[command(flatten)]
        connection: Connection,
        #[command(flatten)]
        location: ArchiveLocation,
        #[command(subcommand)]
        command: ArchiveCommand,
    },
    /// The cluster through the Kafka protocol (any broker)
    Cluster {
        #[command(flatten)]
        connection: Connection,
        #[command(subcommand)]
        command: ClusterCommand,
    },
}

fn init_logging(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,object_store=warn"));
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// SIGTERM and SIGINT, caught from before the broker starts. A signal that arrives while
/// it is still starting (systemd stopping it early, a test harness, a start waiting for
/// an unreachable etcd) ends the start at once with exit status 0; one after the start
/// is a controlled shutdown.
struct ShutdownSignals {
    terminate: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
}

impl ShutdownSignals {
    fn install() -> anyhow::Result<Self> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Self {
            terminate: signal(SignalKind::terminate()).context("installing the SIGTERM handler")?,
            interrupt: signal(SignalKind::interrupt()).context("installing the SIGINT handler")?,
        })
    }

    async fn received(&mut self) {
        tokio::select! {
            _ = self.terminate.recv() => {}
            _ = self.interrupt.recv() => {}
        }
    }
}

/// Runs an admin command on a small single-threaded runtime.
fn admin(command: Command) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        match command {
            Command::Topic {
                connection,
                command,
            } => tern::cli::run_topic(&connection, command).await,
            Command::Group {
                connection,
                command,
            } => tern::cli::run_group(&connection, command).await,
            Command::Cluster {
                connection,
                command,
            } => tern::cli::run_cluster(&connection, command).await,
            Command::Txn {
                connection,
                command,
            } => tern::cli::run_txn(&connection, command).await,
            Command::User {
                connection,
                command,
            } => tern::cli::run_user(&connection, command).await,
            Command::Acl {
                connection,
                command,
            } => tern::cli::run_acl(&connection, command).await,
            Command::Quota {
                connection,
                command,
            } => tern::cli::run_quota(&connection, command).await,
            Command::Archive {
                connection,
                location,
                command,
            } => tern::cli::archive::run(&connection, &location, command).await,
            Command::Serve(_) => Ok(()),
        }
    })
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let args = match cli.command {
        Command::Serve(args) => *args,
        other => return admin(other),
    };
    let config = Config::resolve(args).context("invalid configuration")?;
    init_logging(&config.log_format);
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = config.worker_threads {
        runtime.worker_threads(threads);
    }
    let runtime = runtime
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime.block_on(async {
        let mut signals = ShutdownSignals::install()?;
        let broker = tokio::select! {
            started = Broker::start(config) => started.context("starting the broker")?,
            () = signals.received() => {
                // No client has been served before the start completes, so there is
                // nothing to hand over; what the start wrote (recovery, a follower's
                // first fetches) is crash-safe like any write, and the next start
                // recovers it. Waiting out a minute of etcd retries would only delay
                // the stop.
                tracing::info!("shutdown requested while starting; exiting");
                return Ok(());
            }
        };
        signals.received().await;
        broker.shutdown().await.context("shutting down")?;
        Ok(())
    })
}
