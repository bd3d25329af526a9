//! `tern user add|list|remove`: SCRAM users through AlterUserScramCredentials and
//! DescribeUserScramCredentials, as Kafka's `kafka-configs --alter --add-config
//! 'SCRAM-SHA-512=[password=…]'` does. The password is read from a prompt (no echo) or,
//! when stdin is not a terminal, from its first line; never from the command line. The
//! salt is chosen and the password salted here: only the salted password travels.

use std::io::{BufRead, IsTerminal};

use kafka_protocol::messages::alter_user_scram_credentials_request::{
    ScramCredentialDeletion, ScramCredentialUpsertion,
};
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, DescribeUserScramCredentialsRequest,
};
use kafka_protocol::protocol::StrBytes;
use serde_json::json;

use super::client;
use super::commands::{check, Connection, UserCommand};
use super::output;
use crate::security::credentials::ScramMechanism;

pub async fn run(connection: &Connection, command: UserCommand) -> anyhow::Result<()> {
    match command {
        UserCommand::Add {
            name,
            mechanism,
            iterations,
        } => {
            let mechanism = parse_mechanism(&mechanism)?;
            let password = read_password(&name)?;
            let salt: [u8; 32] = rand::random();
            let salted = mechanism.hi(password.as_bytes(), &salt, iterations);
            let request = AlterUserScramCredentialsRequest::default().with_upsertions(vec![
                ScramCredentialUpsertion::default()
                    .with_name(StrBytes::from_string(name.clone()))
                    .with_mechanism(mechanism.kafka_type())
                    .with_iterations(iterations as i32)
                    .with_salt(salt.to_vec().into())
                    .with_salted_password(salted.into()),
            ]);
            alter(connection, request, &name).await?;
            println!("user {name}: {mechanism} credential set");
        }
        UserCommand::Remove { name, mechanism } => {
            let mechanism = parse_mechanism(&mechanism)?;
            let request = AlterUserScramCredentialsRequest::default().with_deletions(vec![
                ScramCredentialDeletion::default()
                    .with_name(StrBytes::from_string(name.clone()))
                    .with_mechanism(mechanism.kafka_type()),
            ]);
            alter(connection, request, &name).await?;
            println!("user {name}: {mechanism} credential removed");
        }
        UserCommand::List => list(connection).await?,
    }
    Ok(())
}

fn parse_mechanism(name: &str) -> anyhow::Result<ScramMechanism> {
    ScramMechanism::from_name(name).ok_or_else(|| {
        anyhow::anyhow!("unknown mechanism {name:?}: SCRAM-SHA-256 or SCRAM-SHA-512")
    })
}

async fn alter(
    connection: &Connection,
    request: AlterUserScramCredentialsRequest,
    name: &str,
) -> anyhow::Result<()> {
    let mut client = client::connect(connection).await?;
    let (_, response) = client.send(request, 0).await?;
    for result in &response.results {
        check(
            result.error_code,
            result.error_message.as_deref(),
            &format!("user {name}"),
        )?;
    }
    Ok(())
}

async fn list(connection: &Connection) -> anyhow::Result<()> {
    let mut client = client::connect(connection).await?;
    let (_, response) = client
        .send(
            DescribeUserScramCredentialsRequest::default().with_users(None),
            0,
        )
        .await?;
    check(
        response.error_code,
        response.error_message.as_deref(),
        "listing users",
    )?;
    let mut rows = Vec::new();
    for result in &response.results {
        check(
            result.error_code,
            result.error_message.as_deref(),
            result.user.as_str(),
        )?;
        for info in &result.credential_infos {
            let mechanism = ScramMechanism::from_kafka_type(info.mechanism)
                .map_or_else(|| format!("type {}", info.mechanism), |m| m.to_string());
            rows.push(vec![
                result.user.to_string(),
                mechanism,
                info.iterations.to_string(),
            ]);
        }
    }
    if connection.json {
        let users: Vec<_> = rows
            .iter()
            .map(|r| json!({"user": r[0], "mechanism": r[1], "iterations": r[2].parse::<i64>().unwrap_or(0)}))
            .collect();
        return output::json(&json!(users));
    }
    output::table(&["USER", "MECHANISM", "ITERATIONS"], &rows);
    Ok(())
}

/// The password: prompted for twice without echo on a terminal, else stdin's first line.
fn read_password(user: &str) -> anyhow::Result<String> {
    let password = if std::io::stdin().is_terminal() {
        let first = rpassword::prompt_password(format!("Password for {user}: "))?;
        let again = rpassword::prompt_password("Again: ")?;
        anyhow::ensure!(first == again, "the passwords differ");
        first
    } else {
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line)?;
        line.trim_end_matches(['\r', '\n']).to_string()
    };
    anyhow::ensure!(!password.is_empty(), "the password is empty");
    Ok(password)
}
