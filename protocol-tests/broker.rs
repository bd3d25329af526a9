//! Starting the broker under test (one process per test, killed on drop), or pointing
//! at an external broker with `TERN_PROTOCOL_TARGET=host:port`.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub const NODE_ID: i32 = 1;
pub const CLUSTER_ID: &str = "tern-test";
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug)]
pub struct Broker {
    pub addr: String,
    pub host: String,
    pub port: u16,
    /// True when the suite targets an already-running broker (TERN_PROTOCOL_TARGET).
    pub external: bool,
    child: Option<Child>,
    log_path: Option<PathBuf>,
    // Kept last so the directory is removed after the child is killed.
    _dir: Option<tempfile::TempDir>,
}

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    l.local_addr().expect("local_addr").port()
}

fn can_connect(addr: &str) -> bool {
    let Ok(mut it) = addr.to_socket_addrs() else {
        return false;
    };
    let Some(sa) = it.next() else { return false };
    TcpStream::connect_timeout(&sa, Duration::from_millis(500)).is_ok()
}

#[allow(unsafe_code)]
fn die_with_parent(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl is async-signal-safe; this only asks the kernel to SIGKILL the
    // broker if the spawning test thread/process dies without running our Drop.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
}

impl Broker {
    pub fn start() -> Broker {
        if let Ok(target) = std::env::var("TERN_PROTOCOL_TARGET") {
            let target = target.trim().to_string();
            let (host, port) = target
                .rsplit_once(':')
                .expect("TERN_PROTOCOL_TARGET must be host:port");
            let port: u16 = port.parse().expect("TERN_PROTOCOL_TARGET port");
            assert!(
                can_connect(&target),
                "TERN_PROTOCOL_TARGET={target} does not accept connections"
            );
            return Broker {
                addr: target.clone(),
                host: host.to_string(),
                port,
                external: true,
                child: None,
                log_path: None,
                _dir: None,
            };
        }
        let dir = tempfile::Builder::new()
            .prefix("tern-protocol-")
            .tempdir()
            .expect("tempdir");
        let mut last_err = String::new();
        for attempt in 0..3 {
            let port = free_port();
            let addr = format!("127.0.0.1:{port}");
            let data = dir.path().join(format!("data-{attempt}"));
            std::fs::create_dir_all(&data).expect("create data dir");
            let log_path = dir.path().join(format!("broker-{attempt}.log"));
            let log = File::create(&log_path).expect("create broker log");
            let log2 = log.try_clone().expect("clone log handle");
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_tern"));
            cmd.arg("serve")
                .arg("--data-dir")
                .arg(&data)
                .arg("--listen")
                .arg(&addr)
                .arg("--node-id")
                .arg(NODE_ID.to_string())
                .arg("--cluster-id")
                .arg(CLUSTER_ID)
                .stdin(Stdio::null())
                .stdout(Stdio::from(log))
                .stderr(Stdio::from(log2));
            die_with_parent(&mut cmd);
            let child = cmd.spawn().expect("spawn tern broker");
            let mut broker = Broker {
                addr: addr.clone(),
                host: "127.0.0.1".to_string(),
                port,
                external: false,
                child: Some(child),
                log_path: Some(log_path),
                _dir: None,
            };
            let deadline = Instant::now() + STARTUP_TIMEOUT;
            loop {
                if can_connect(&addr) {
                    broker._dir = Some(dir);
                    return broker;
                }
                if !broker.is_running() {
                    last_err = format!("broker exited during startup; log:\n{}", broker.log_tail());
                    break;
                }
                if Instant::now() > deadline {
                    last_err = format!(
                        "broker did not accept connections within {STARTUP_TIMEOUT:?}; log:\n{}",
                        broker.log_tail()
                    );
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            // `broker` is dropped here (killed); retry on another port.
        }
        panic!("could not start tern: {last_err}");
    }

    /// Whether the owned broker process is still running (external targets: accepts connections).
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => can_connect(&self.addr),
        }
    }

    /// Exit status description of a dead owned broker.
    pub fn exit_status(&mut self) -> String {
        match self.child.as_mut().map(|c| c.try_wait()) {
            Some(Ok(Some(st))) => format!("{st}"),
            Some(Ok(None)) => "running".into(),
            Some(Err(e)) => format!("unknown ({e})"),
            None => "external".into(),
        }
    }

    /// (VmHWM, VmRSS) of the owned broker in KiB, from /proc.
    pub fn memory_kib(&self) -> Option<(u64, u64)> {
        let pid = self.child.as_ref()?.id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let field = |name: &str| {
            status
                .lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u64>().ok())
        };
        Some((field("VmHWM:")?, field("VmRSS:")?))
    }

    /// Last ~8 KiB of the broker's stdout/stderr.
    pub fn log_tail(&self) -> String {
        let Some(p) = &self.log_path else {
            return "(external broker: no log)".into();
        };
        let Ok(mut f) = File::open(p) else {
            return "(no log)".into();
        };
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        let _ = f.seek(SeekFrom::Start(len.saturating_sub(8192)));
        let mut s = Vec::new();
        let _ = f.read_to_end(&mut s);
        String::from_utf8_lossy(&s).into_owned()
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A topic name unique to this process and call, safe for Kafka ([a-zA-Z0-9._-], < 249 chars).
pub fn unique_name(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
        % 100_000_000;
    format!("pt-{prefix}-{}-{t}-{n}", std::process::id())
}

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
