//! Starting the broker under test (one process per test, killed on drop), or pointing
//! at an external broker with `TERN_PROTOCOL_TARGET=host:port`.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub const NODE_ID: i32 = 1;
pub const CLUSTER_ID: &str = "tern-test";
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a SIGTERM'd broker may take to shut down cleanly.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);

/// Consumer-group flag every suite broker gets when the binary knows it: no initial
/// rebalance delay, so a group's first JoinGroup is answered at once (Kafka waits
/// group.initial.rebalance.delay.ms, 3 s by default).
pub const REBALANCE_DELAY_FLAG: &str = "--group-initial-rebalance-delay-ms";

/// `tern serve --help`, read once.
fn serve_help() -> &'static str {
    static HELP: OnceLock<String> = OnceLock::new();
    HELP.get_or_init(|| {
        Command::new(env!("CARGO_BIN_EXE_tern"))
            .args(["serve", "--help"])
            .stdin(Stdio::null())
            .output()
            .map(|o| {
                let mut s = String::from_utf8_lossy(&o.stdout).into_owned();
                s.push_str(&String::from_utf8_lossy(&o.stderr));
                s
            })
            .unwrap_or_default()
    })
}

/// Whether `tern serve` accepts `flag` (e.g. `--group-min-session-timeout-ms`).
pub fn serve_supports(flag: &str) -> bool {
    serve_help()
        .split(|c: char| c.is_whitespace() || c == ',' || c == '=' || c == '[' || c == '<')
        .any(|w| w == flag)
}

#[derive(Debug)]
pub struct Broker {
    pub addr: String,
    pub host: String,
    pub port: u16,
    /// True when the suite targets an already-running broker (TERN_PROTOCOL_TARGET).
    pub external: bool,
    child: Option<Child>,
    log_path: Option<PathBuf>,
    /// Data directory of an owned broker (kept across restarts).
    data_dir: Option<PathBuf>,
    /// Extra `tern serve` arguments, reused on restart.
    extra_args: Vec<String>,
    /// Number of (re)starts so far, for log file names.
    starts: u32,
    /// The log of every start, scanned for panics when the broker is dropped.
    log_paths: Vec<PathBuf>,
    // Kept last so the directory is removed after the child is killed.
    _dir: Option<tempfile::TempDir>,
}

pub fn free_port() -> u16 {
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
    /// Starts an owned broker with extra `tern serve` arguments (ignored for external
    /// targets, whose configuration the suite cannot change). The suite's default
    /// `--group-initial-rebalance-delay-ms 0` is added when the binary knows the flag
    /// and `extra` does not set it.
    pub fn start_with(extra: &[&str]) -> Broker {
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
                data_dir: None,
                extra_args: Vec::new(),
                starts: 0,
                log_paths: Vec::new(),
                _dir: None,
            };
        }
        let mut extra_args: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        if !extra.contains(&REBALANCE_DELAY_FLAG) && serve_supports(REBALANCE_DELAY_FLAG) {
            extra_args.push(REBALANCE_DELAY_FLAG.to_string());
            extra_args.push("0".to_string());
        }
        let dir = tempfile::Builder::new()
            .prefix("tern-protocol-")
            .tempdir()
            .expect("tempdir");
        let mut last_err = String::new();
        for attempt in 0..3 {
            let data = dir.path().join(format!("data-{attempt}"));
            std::fs::create_dir_all(&data).expect("create data dir");
            let mut broker = Broker {
                addr: String::new(),
                host: "127.0.0.1".to_string(),
                port: 0,
                external: false,
                child: None,
                log_path: None,
                data_dir: Some(data),
                extra_args: extra_args.clone(),
                starts: 0,
                log_paths: Vec::new(),
                _dir: None,
            };
            match broker.spawn_on(dir.path(), free_port()) {
                Ok(()) => {
                    broker._dir = Some(dir);
                    return broker;
                }
                Err(e) => last_err = e,
            }
            // `broker` is dropped here (killed); retry on another port.
        }
        panic!("could not start tern: {last_err}");
    }

    /// Spawns `tern serve` on the broker's data dir and `port`, waiting until it accepts
    /// connections. On failure the child is killed and the reason (with log) returned.
    fn spawn_on(&mut self, log_dir: &std::path::Path, port: u16) -> Result<(), String> {
        let data = self.data_dir.clone().expect("owned broker has a data dir");
        let addr = format!("127.0.0.1:{port}");
        let log_path = log_dir.join(format!(
            "broker-{}-{}.log",
            data.file_name().and_then(|n| n.to_str()).unwrap_or("data"),
            self.starts
        ));
        self.starts += 1;
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
            // `{port}` in an argument is this start's Kafka port (a `--listeners` list
            // that must name the port the suite connects to).
            .args(
                self.extra_args
                    .iter()
                    .map(|a| a.replace("{port}", &port.to_string())),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log2));
        die_with_parent(&mut cmd);
        let child = cmd.spawn().expect("spawn tern broker");
        self.child = Some(child);
        self.log_paths.push(log_path.clone());
        self.log_path = Some(log_path);
        self.addr = addr.clone();
        self.port = port;
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            if can_connect(&addr) {
                return Ok(());
            }
            if !self.is_running() {
                let e = format!(
                    "broker exited during startup ({}); args {:?}; log:\n{}",
                    self.exit_status(),
                    self.extra_args,
                    self.log_tail()
                );
                self.child = None;
                return Err(e);
            }
            if Instant::now() > deadline {
                let e = format!(
                    "broker did not accept connections within {STARTUP_TIMEOUT:?}; log:\n{}",
                    self.log_tail()
                );
                if let Some(mut c) = self.child.take() {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                return Err(e);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Replaces the extra `tern serve` arguments the next restart uses.
    pub fn set_args(&mut self, extra: &[&str]) {
        self.extra_args = extra.iter().map(|s| s.to_string()).collect();
    }

    /// Stops the owned broker with SIGTERM (clean shutdown) and starts it again on the
    /// same data directory, same port if possible. Panics for external targets.
    pub fn restart(&mut self) {
        assert!(!self.external, "cannot restart an external broker");
        let mut child = self.child.take().expect("owned broker is running");
        let pid = child.id();
        sigterm(pid);
        let deadline = Instant::now() + SHUTDOWN_TIMEOUT;
        loop {
            match child.try_wait() {
                Ok(Some(st)) => {
                    assert!(
                        st.success(),
                        "broker exited with {st} after SIGTERM; log:\n{}",
                        self.log_tail()
                    );
                    break;
                }
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!(
                        "broker did not exit within {SHUTDOWN_TIMEOUT:?} of SIGTERM; log:\n{}",
                        self.log_tail()
                    );
                }
            }
        }
        self.start_again();
    }

    /// Kills the owned broker with SIGKILL (no shutdown at all) and starts it again on
    /// the same data directory. Panics for external targets.
    pub fn kill9_restart(&mut self) {
        assert!(!self.external, "cannot kill an external broker");
        let mut child = self.child.take().expect("owned broker is running");
        let _ = child.kill(); // SIGKILL
        let _ = child.wait();
        self.start_again();
    }

    fn start_again(&mut self) {
        let log_dir = self
            .log_path
            .as_ref()
            .and_then(|p| p.parent())
            .map(|p| p.to_path_buf())
            .expect("owned broker has a log dir");
        let mut errs = Vec::new();
        // The same port first (clients and Metadata keep their address), then others.
        for port in [self.port, free_port(), free_port()] {
            match self.spawn_on(&log_dir, port) {
                Ok(()) => return,
                Err(e) => errs.push(format!("port {port}: {e}")),
            }
        }
        panic!(
            "could not restart tern on its data dir:\n{}",
            errs.join("\n")
        );
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

#[allow(unsafe_code)]
fn sigterm(pid: u32) {
    // SAFETY: kill(2) with a pid we spawned and still own (not yet reaped).
    unsafe {
        libc::kill(pid as libc::pid_t, libc::SIGTERM);
    }
}

impl Broker {
    /// The `panicked at` lines of every log of this broker's starts.
    fn panics(&self) -> Vec<String> {
        let mut found = Vec::new();
        for path in &self.log_paths {
            if let Ok(bytes) = std::fs::read(path) {
                let text = String::from_utf8_lossy(&bytes);
                found.extend(
                    text.lines()
                        .filter(|l| l.contains("panicked at"))
                        .map(|l| l.trim().chars().take(300).collect::<String>()),
                );
            }
        }
        found
    }

    /// Ends an owned broker at the end of its test: SIGTERM, which must end it with
    /// status 0 within SHUTDOWN_TIMEOUT (else SIGKILL). The problems found: the broker
    /// had exited by itself (only kill9_restart kills it on purpose, and it restarts),
    /// a bad status or a hang on SIGTERM, a panic in any of its logs.
    fn stop_checked(&mut self) -> Vec<String> {
        let mut problems = Vec::new();
        if let Some(mut child) = self.child.take() {
            match child.try_wait() {
                Ok(Some(st)) => problems.push(format!("the broker exited by itself ({st})")),
                Ok(None) => {
                    sigterm(child.id());
                    let deadline = Instant::now() + SHUTDOWN_TIMEOUT;
                    loop {
                        match child.try_wait() {
                            Ok(Some(st)) if st.success() => break,
                            Ok(Some(st)) => {
                                problems.push(format!("SIGTERM ended the broker with {st}"));
                                break;
                            }
                            Ok(None) if Instant::now() < deadline => {
                                std::thread::sleep(Duration::from_millis(20))
                            }
                            _ => {
                                let _ = child.kill();
                                let _ = child.wait();
                                problems.push(format!(
                                    "the broker did not exit within {SHUTDOWN_TIMEOUT:?} of SIGTERM"
                                ));
                                break;
                            }
                        }
                    }
                }
                Err(e) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    problems.push(format!("the broker's status is unknown ({e})"));
                }
            }
        }
        problems.extend(self.panics());
        problems
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if self.external {
            return;
        }
        let problems = self.stop_checked();
        // A failing test already panics; its own message is the one to see.
        if !problems.is_empty() && !std::thread::panicking() {
            panic!("{}; log:\n{}", problems.join("; "), self.log_tail());
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

#[allow(unsafe_code)]
#[cfg(test)]
fn sigkill(pid: u32) {
    // SAFETY: kill(2) with a pid we spawned and still own (not yet reaped).
    unsafe {
        libc::kill(pid as libc::pid_t, libc::SIGKILL);
    }
}

/// The harness fails a test whose broker died without the test asking (here a SIGKILL
/// the harness did not send) or panicked, though the test body itself passed.
#[cfg(test)]
mod harness_checks {
    use super::*;

    #[test]
    #[should_panic(expected = "the broker exited by itself")]
    fn a_broker_that_exited_by_itself_fails_its_test() {
        let mut broker = Broker::start_with(&[]);
        assert!(
            !broker.external,
            "needs an owned broker (unset TERN_PROTOCOL_TARGET)"
        );
        sigkill(broker.child.as_ref().expect("running").id());
        while broker.is_running() {
            std::thread::sleep(Duration::from_millis(20));
        }
        drop(broker);
    }

    #[test]
    #[should_panic(expected = "panicked at src/injected.rs")]
    fn a_panic_in_the_broker_log_fails_its_test() {
        let mut broker = Broker::start_with(&[]);
        assert!(
            !broker.external,
            "needs an owned broker (unset TERN_PROTOCOL_TARGET)"
        );
        // As if an earlier start of this broker had panicked (appending to the running
        // broker's own log would be overwritten: it writes at its own offset).
        let earlier = broker
            .log_path
            .as_ref()
            .expect("a log")
            .with_file_name("broker-earlier-start.log");
        std::fs::write(&earlier, "thread 'x' panicked at src/injected.rs:1:1:\n").expect("write");
        broker.log_paths.insert(0, earlier);
        drop(broker);
    }

    #[test]
    fn a_clean_sigterm_passes() {
        drop(Broker::start_with(&[]));
    }
}
