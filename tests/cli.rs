//! The admin CLI against a real broker process: every command's JSON output.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Broker {
    child: Child,
    address: String,
    _dir: tempfile::TempDir,
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Starts a broker on a fresh port, retrying on another port when it exits at startup:
/// the port `free_port` found may be taken again (by another test's probe or broker)
/// before the broker binds it, and then the broker exits with "address in use".
fn start_broker() -> Broker {
    let dir = tempfile::tempdir().expect("temp dir");
    for attempt in 0..5 {
        let data = dir.path().join(format!("data-{attempt}"));
        let address = format!("127.0.0.1:{}", free_port());
        let mut child = Command::new(env!("CARGO_BIN_EXE_tern"))
            .args(["serve", "--data-dir"])
            .arg(&data)
            .args([
                "--listen",
                &address,
                "--metrics",
                "127.0.0.1:0",
                "--offsets-topic-num-partitions",
                "3",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("broker starts");
        if listens_while_running(&mut child, &address) {
            return Broker {
                child,
                address,
                _dir: dir,
            };
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    panic!("no broker started in five attempts");
}

/// Waits until `address` accepts connections while `child` runs, and is still running
/// a moment later: an accepting port alone may be someone else's listener while the
/// broker is on its way out for failing to bind it.
fn listens_while_running(child: &mut Child, address: &str) -> bool {
    let running = |child: &mut Child| matches!(child.try_wait(), Ok(None));
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if !running(child) {
            return false;
        }
        if std::net::TcpStream::connect(address).is_ok() {
            std::thread::sleep(Duration::from_millis(200));
            return running(child) && std::net::TcpStream::connect(address).is_ok();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// Runs `tern <args> -b <broker> --json` and parses its output.
fn tern_json(broker: &Broker, args: &[&str]) -> serde_json::Value {
    let output = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(args)
        .args(["-b", &broker.address, "--json"])
        .output()
        .expect("cli runs");
    assert!(
        output.status.success(),
        "tern {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("JSON output")
}

fn tern_fails(broker: &Broker, args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(args)
        .args(["-b", &broker.address])
        .output()
        .expect("cli runs");
    assert!(!output.status.success(), "tern {args:?} should fail");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn topic_commands_round_trip_through_the_kafka_protocol() {
    let broker = start_broker();
    let created = tern_json(
        &broker,
        &[
            "topic",
            "create",
            "orders",
            "--partitions",
            "3",
            "--config",
            "retention.ms=3600000",
        ],
    );
    assert_eq!(created["partitions"], 3);
    let listed = tern_json(&broker, &["topic", "list"]);
    assert_eq!(
        listed,
        serde_json::json!([{"name": "orders", "partitions": 3, "replication_factor": 1}])
    );
    let described = tern_json(&broker, &["topic", "describe", "orders"]);
    assert_eq!(described["partitions"].as_array().map(Vec::len), Some(3));
    assert_eq!(described["configs"]["retention.ms"], "3600000");
    assert_eq!(described["partitions"][0]["leader"], 1);
    tern_json(
        &broker,
        &[
            "topic",
            "alter-config",
            "orders",
            "--set",
            "segment.ms=100000",
            "--delete",
            "retention.ms",
        ],
    );
    let described = tern_json(&broker, &["topic", "describe", "orders"]);
    assert_eq!(
        described["configs"],
        serde_json::json!({"segment.ms": "100000"})
    );
    let message = tern_fails(&broker, &["topic", "create", "orders"]);
    assert!(message.contains("TopicAlreadyExists"), "{message}");
    let message = tern_fails(
        &broker,
        &[
            "topic",
            "alter-config",
            "orders",
            "--set",
            "retention.ms=soon",
        ],
    );
    assert!(message.contains("InvalidConfig"), "{message}");
    tern_json(&broker, &["topic", "delete", "orders"]);
    assert_eq!(
        tern_json(&broker, &["topic", "list"]),
        serde_json::json!([])
    );
}

#[test]
fn cluster_and_group_commands_describe_a_single_node() {
    let broker = start_broker();
    let cluster = tern_json(&broker, &["cluster", "describe"]);
    assert_eq!(cluster["controller"], 1);
    assert_eq!(cluster["brokers"][0]["id"], 1);
    assert_eq!(cluster["under_replicated"], serde_json::json!([]));
    assert_eq!(
        tern_json(&broker, &["group", "list"]),
        serde_json::json!([])
    );
    let message = tern_fails(&broker, &["topic", "describe", "missing"]);
    assert!(message.contains("UnknownTopicOrPartition"), "{message}");
}

/// Runs `tern <args>` as written (no `-b` added) and parses its JSON output.
fn tern_json_as_given(args: &[&str]) -> serde_json::Value {
    let output = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(args)
        .output()
        .expect("cli runs");
    assert!(
        output.status.success(),
        "tern {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("JSON output")
}

#[test]
fn kafka_tool_spellings_are_accepted() {
    let broker = start_broker();
    let address = broker.address.as_str();
    // As kafka-topics.sh spells it: --bootstrap-server, --replication-factor,
    // --partitions, repeated --config.
    let created = tern_json_as_given(&[
        "topic",
        "create",
        "payments",
        "--bootstrap-server",
        address,
        "--replication-factor",
        "1",
        "--partitions",
        "4",
        "--config",
        "retention.ms=7200000",
        "--config",
        "cleanup.policy=delete",
        "--json",
    ]);
    assert_eq!(created["partitions"], 4);
    let described = tern_json_as_given(&[
        "topic",
        "describe",
        "payments",
        "--bootstrap-server",
        address,
        "--json",
    ]);
    assert_eq!(described["partitions"].as_array().map(Vec::len), Some(4));
    assert_eq!(described["configs"]["retention.ms"], "7200000");
    assert_eq!(
        described["partitions"][0]["replicas"],
        serde_json::json!([1])
    );
    let listed = tern_json_as_given(&["topic", "list", "--bootstrap-server", address, "--json"]);
    assert_eq!(
        listed,
        serde_json::json!([{"name": "payments", "partitions": 4, "replication_factor": 1}])
    );
    // group and cluster take it too, anywhere after the command.
    let cluster = tern_json_as_given(&[
        "cluster",
        "--bootstrap-server",
        address,
        "describe",
        "--json",
    ]);
    assert_eq!(cluster["brokers"][0]["id"], 1);
    assert_eq!(
        tern_json_as_given(&["group", "list", "--bootstrap-server", address, "--json"]),
        serde_json::json!([])
    );
    // One broker cannot hold three replicas: the broker's refusal reaches the user.
    let output = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["topic", "create", "too-many", "--replication-factor", "3"])
        .args(["--bootstrap-server", address])
        .output()
        .expect("cli runs");
    assert!(
        !output.status.success(),
        "replication factor 3 on one broker"
    );
    let message = String::from_utf8_lossy(&output.stderr);
    assert!(message.contains("InvalidReplicationFactor"), "{message}");
}
