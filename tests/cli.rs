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

fn start_broker() -> Broker {
    let dir = tempfile::tempdir().expect("temp dir");
    let port = free_port();
    let address = format!("127.0.0.1:{port}");
    let child = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["serve", "--data-dir"])
        .arg(dir.path())
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
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(&address).is_err() {
        assert!(Instant::now() < deadline, "broker did not start listening");
        std::thread::sleep(Duration::from_millis(50));
    }
    Broker {
        child,
        address,
        _dir: dir,
    }
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
