//! Admin commands (`tern topic|group|txn|cluster ...`). They speak the Kafka protocol to
//! any broker, tern or Apache Kafka, and print tables or, with `--json`, JSON for
//! scripts. This is an edge of the program: errors are `anyhow`.

pub mod archive;
pub mod client;
mod cluster;
mod commands;
mod group;
mod output;
mod quota;
mod restore;
mod acl;
mod topic;
mod txn;
mod user;

pub use archive::{ArchiveCommand, ArchiveLocation};
pub use client::Client;
pub use commands::{
    AclCommand, AclSelection, ClusterCommand, Connection, GroupCommand, QuotaCommand, TopicCommand,
    TxnCommand, UserCommand,
};

pub async fn run_topic(connection: &Connection, command: TopicCommand) -> anyhow::Result<()> {
    topic::run(connection, command).await
}

pub async fn run_group(connection: &Connection, command: GroupCommand) -> anyhow::Result<()> {
    group::run(connection, command).await
}

pub async fn run_acl(connection: &Connection, command: AclCommand) -> anyhow::Result<()> {
    acl::run(connection, command).await
}

pub async fn run_user(connection: &Connection, command: UserCommand) -> anyhow::Result<()> {
    user::run(connection, command).await
}

pub async fn run_quota(connection: &Connection, command: QuotaCommand) -> anyhow::Result<()> {
    quota::run(connection, command).await
}

pub async fn run_cluster(connection: &Connection, command: ClusterCommand) -> anyhow::Result<()> {
    cluster::run(connection, command).await
}

pub async fn run_txn(connection: &Connection, command: TxnCommand) -> anyhow::Result<()> {
    txn::run(connection, command).await
}
