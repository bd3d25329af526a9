//! The floor: what the kernel itself costs for moving the bytes a broker moves, so that
//! the broker's CPU seconds per GB (bench/single.sh) can be read as a multiple of it
//! rather than as a bare number that means little on another machine.
//!
//! * write floor: a sender thread writes N bytes over loopback TCP; the receiver reads
//!   them into a reused 1 MiB buffer, CRC32Cs every 1 KiB record (a broker checks each
//!   batch's; here every record is one), `pwrite`s the chunk into a `posix_fallocate`d
//!   file (as the broker writes segments) and `fdatasync`s once a second and at the end. The floor is the receiver thread's CPU plus the kernel
//!   workers' (kworker, jbd2: writeback and the ext4 journal run there, on no process's
//!   account). The sender's CPU is the client's and is reported apart.
//! * sendfile floor: the written file (hot in the page cache, as a just-produced log is)
//!   is `sendfile`d in 1 MiB calls to a loopback socket that a reader thread drains. The
//!   floor is the sending thread's CPU plus the kernel workers'; the reader is the client.
//!
//! On loopback, much of the receiving side's TCP work (softirq) runs in the sending
//! thread and is charged to it. The broker benchmarks measure the broker process on
//! loopback too, so both sides of the ratio are charged the same way.
//!
//! Each rep is write then sendfile on a fresh file; the summary is the rep with the
//! median total (its parts add up) and the min-max of the totals over the reps.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::Parser;

/// Bytes per socket write, read, `pwrite` and `sendfile` call.
const CHUNK: usize = 1 << 20;
/// Bytes per record: each gets its own CRC32C.
const RECORD: usize = 1 << 10;

#[derive(Debug, Parser)]
#[command(
    about = "The kernel's own CPU cost per GB for the bytes a broker moves (write and sendfile floors)"
)]
struct Args {
    /// GiB moved per rep (rounded down to whole MiB; fractions allowed for quick runs).
    #[arg(long, default_value_t = 2.0)]
    gib: f64,
    /// Reps of each floor; the summary is the median rep and the min-max.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Directory for the scratch file. Default: a new directory under /tmp, the
    /// filesystem bench/single.sh gives the broker.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Also write the median figures to this file as JSON (one key per line).
    #[arg(long)]
    json: Option<PathBuf>,
}

/// CPU seconds (user + system) of the calling thread.
fn thread_cpu() -> f64 {
    // SAFETY: rusage is plain data; getrusage only writes into it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a rusage; RUSAGE_THREAD cannot fail on Linux.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(ru.ru_utime) + secs(ru.ru_stime)
}

/// utime + stime ticks of every kernel worker thread (comm `kworker*` or `jbd2*`), by pid.
fn kernel_worker_ticks() -> HashMap<u32, u64> {
    let mut ticks = HashMap::new();
    let Ok(proc) = std::fs::read_dir("/proc") else {
        return ticks;
    };
    for entry in proc.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        // A process may exit between the listing and the read: skip it.
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = &stat[open + 1..close];
        if !(comm.starts_with("kworker") || comm.starts_with("jbd2")) {
            continue;
        }
        // After the comm come fields 3 (state) onwards; utime and stime are fields 14 and 15.
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        let field = |i: usize| fields.get(i - 3).and_then(|f| f.parse::<u64>().ok());
        if let (Some(utime), Some(stime)) = (field(14), field(15)) {
            ticks.insert(pid, utime + stime);
        }
    }
    ticks
}

/// Kernel workers' CPU seconds between two snapshots. A worker that appeared since counts
/// whole; one that exited in between is lost (idle kworkers live minutes, runs seconds).
fn kernel_worker_secs(before: &HashMap<u32, u64>, after: &HashMap<u32, u64>) -> f64 {
    let ticks: u64 = after
        .iter()
        .map(|(pid, &t)| match before.get(pid) {
            Some(&b) if b <= t => t - b,
            _ => t, // new, or a reused pid
        })
        .sum();
    // SAFETY: sysconf has no preconditions.
    ticks as f64 / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

/// One rep's figures: CPU seconds of each part and wall seconds.
struct Rep {
    /// The broker-side thread (receiver for write, sender for sendfile).
    side: f64,
    kworker: f64,
    /// The client-side thread, not in the floor.
    client: f64,
    secs: f64,
}

/// The write floor over `bytes` into a new file at `path`, left in place for sendfile.
fn write_floor(path: &Path, bytes: u64) -> Result<(File, Rep)> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .with_context(|| format!("create {}", path.display()))?;
    // SAFETY: a valid open fd; posix_fallocate returns an errno rather than setting it.
    let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, bytes as libc::off_t) };
    if rc != 0 {
        bail!(
            "posix_fallocate {} bytes in {}: {}",
            bytes,
            path.display(),
            io::Error::from_raw_os_error(rc)
        );
    }
    // The allocation's own metadata reaches the disk before the measurement starts.
    file.sync_all().context("fsync after posix_fallocate")?;

    let listener = TcpListener::bind("127.0.0.1:0").context("bind a loopback port")?;
    let addr = listener.local_addr().context("local_addr")?;
    let kworker_before = kernel_worker_ticks();
    let sender = thread::spawn(move || -> Result<f64> {
        let mut sock = TcpStream::connect(addr).context("connect to the receiver")?;
        let chunk: Vec<u8> = (0..CHUNK)
            .map(|i| (i % RECORD) as u8 ^ (i / RECORD) as u8)
            .collect();
        let cpu = thread_cpu();
        for _ in 0..bytes / CHUNK as u64 {
            sock.write_all(&chunk).context("send")?;
        }
        sock.shutdown(Shutdown::Write).context("shutdown")?;
        Ok(thread_cpu() - cpu)
    });

    let (mut sock, _) = listener.accept().context("accept the sender")?;
    let start = Instant::now();
    let cpu = thread_cpu();
    let mut buf = vec![0u8; CHUNK];
    let mut crcs = 0u32;
    let mut synced = Instant::now();
    for offset in (0..bytes).step_by(CHUNK) {
        sock.read_exact(&mut buf)
            .with_context(|| format!("receive at byte {offset}"))?;
        for record in buf.chunks(RECORD) {
            crcs ^= crc32c::crc32c(record);
        }
        file.write_all_at(&buf, offset)
            .with_context(|| format!("pwrite at {offset} in {}", path.display()))?;
        if synced.elapsed() >= Duration::from_secs(1) {
            file.sync_data().context("fdatasync")?;
            synced = Instant::now();
        }
    }
    // Durable as acks=all makes a broker's bytes, and no writeback left over for later.
    file.sync_data().context("fdatasync")?;
    let side = thread_cpu() - cpu;
    let secs = start.elapsed().as_secs_f64();
    std::hint::black_box(crcs);
    let client = sender
        .join()
        .map_err(|_| anyhow!("sender thread panicked"))??;
    let kworker = kernel_worker_secs(&kworker_before, &kernel_worker_ticks());
    Ok((
        file,
        Rep {
            side,
            kworker,
            client,
            secs,
        },
    ))
}

/// The sendfile floor: the first `bytes` of `file` to a loopback reader.
fn sendfile_floor(file: &File, bytes: u64) -> Result<Rep> {
    let listener = TcpListener::bind("127.0.0.1:0").context("bind a loopback port")?;
    let addr = listener.local_addr().context("local_addr")?;
    let kworker_before = kernel_worker_ticks();
    let reader = thread::spawn(move || -> Result<(f64, u64)> {
        let mut sock = TcpStream::connect(addr).context("connect to the sender")?;
        let mut buf = vec![0u8; CHUNK];
        let cpu = thread_cpu();
        let mut got = 0u64;
        loop {
            match sock.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => got += n as u64,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e).context("read"),
            }
        }
        Ok((thread_cpu() - cpu, got))
    });

    let (sock, _) = listener.accept().context("accept the reader")?;
    let start = Instant::now();
    let cpu = thread_cpu();
    let mut offset: libc::off_t = 0;
    while (offset as u64) < bytes {
        let count = CHUNK.min((bytes - offset as u64) as usize);
        // SAFETY: valid fds and a valid offset pointer; the kernel advances `offset`.
        let sent =
            unsafe { libc::sendfile(sock.as_raw_fd(), file.as_raw_fd(), &mut offset, count) };
        if sent < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e).with_context(|| format!("sendfile at {offset}"));
            }
        } else if sent == 0 {
            bail!("sendfile: end of file at {offset} of {bytes}");
        }
    }
    let side = thread_cpu() - cpu;
    sock.shutdown(Shutdown::Write).context("shutdown")?;
    let (client, got) = reader
        .join()
        .map_err(|_| anyhow!("reader thread panicked"))??;
    let secs = start.elapsed().as_secs_f64();
    let kworker = kernel_worker_secs(&kworker_before, &kernel_worker_ticks());
    if got != bytes {
        bail!("reader got {got} bytes of {bytes}");
    }
    Ok(Rep {
        side,
        kworker,
        client,
        secs,
    })
}

/// Removes the scratch file (and the directory if it made it) however the run ends.
struct Scratch {
    file: PathBuf,
    own_dir: Option<PathBuf>,
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.file);
        if let Some(dir) = &self.own_dir {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// A floor's reps as CPU-s/GB and GB/s, summarised.
struct Summary {
    /// The rep with the median total (the upper middle for an even count).
    total: f64,
    side: f64,
    kworker: f64,
    client: f64,
    /// Min and max over the reps.
    total_range: (f64, f64),
    side_range: (f64, f64),
    kworker_range: (f64, f64),
    client_range: (f64, f64),
    gb_per_s: f64,
    gb_per_s_range: (f64, f64),
}

fn summarise(reps: &[Rep], gb: f64) -> Summary {
    let per_gb = |r: &Rep| (r.side / gb, r.kworker / gb, r.client / gb);
    let range = |f: &dyn Fn(&Rep) -> f64| {
        reps.iter()
            .map(f)
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
                (lo.min(v), hi.max(v))
            })
    };
    let mut by_total: Vec<&Rep> = reps.iter().collect();
    by_total.sort_by(|a, b| (a.side + a.kworker).total_cmp(&(b.side + b.kworker)));
    let (side, kworker, client) = per_gb(by_total[by_total.len() / 2]);
    let mut speeds: Vec<f64> = reps.iter().map(|r| gb / r.secs).collect();
    speeds.sort_by(f64::total_cmp);
    Summary {
        total: side + kworker,
        side,
        kworker,
        client,
        total_range: range(&|r| (r.side + r.kworker) / gb),
        side_range: range(&|r| r.side / gb),
        kworker_range: range(&|r| r.kworker / gb),
        client_range: range(&|r| r.client / gb),
        gb_per_s: speeds[speeds.len() / 2],
        gb_per_s_range: (speeds[0], speeds[speeds.len() - 1]),
    }
}

fn main() -> Result<()> {
    let args = Args::parse();
    if args.reps == 0 {
        bail!("--reps must be at least 1");
    }
    let bytes = (args.gib * (1u64 << 30) as f64) as u64 / CHUNK as u64 * CHUNK as u64;
    if bytes == 0 {
        bail!("--gib {} is less than one MiB", args.gib);
    }
    let gb = bytes as f64 / 1e9;
    let (dir, own_dir) = match &args.dir {
        Some(dir) => (dir.clone(), None),
        None => {
            let dir = Path::new("/tmp").join(format!("tern-floor.{}", std::process::id()));
            std::fs::create_dir(&dir).with_context(|| format!("create {}", dir.display()))?;
            (dir.clone(), Some(dir))
        }
    };
    let scratch = Scratch {
        file: dir.join(format!("tern-floor.{}.dat", std::process::id())),
        own_dir,
    };

    let (mut writes, mut sends) = (Vec::new(), Vec::new());
    for i in 1..=args.reps {
        let (file, w) = write_floor(&scratch.file, bytes)?;
        let s = sendfile_floor(&file, bytes)?;
        drop(file);
        std::fs::remove_file(&scratch.file)
            .with_context(|| format!("remove {}", scratch.file.display()))?;
        println!(
            "floor rep {i}/{}: write receiver {:.3} + kworker {:.3} CPU-s/GB, sender {:.3}, {:.2} GB/s; sendfile sender {:.3} + kworker {:.3} CPU-s/GB, reader {:.3}, {:.2} GB/s",
            args.reps,
            w.side / gb,
            w.kworker / gb,
            w.client / gb,
            gb / w.secs,
            s.side / gb,
            s.kworker / gb,
            s.client / gb,
            gb / s.secs
        );
        writes.push(w);
        sends.push(s);
    }
    drop(scratch);

    let (w, s) = (summarise(&writes, gb), summarise(&sends, gb));
    let r = |(lo, hi): (f64, f64)| format!("{lo:.3}-{hi:.3}");
    println!(
        "floor write: {:.3} CPU-s/GB (receiver {:.3} + kworker {:.3}), spread {}, {:.2} GB/s ({:.2}-{:.2}); {} reps x {:.2} GB in {}",
        w.total,
        w.side,
        w.kworker,
        r(w.total_range),
        w.gb_per_s,
        w.gb_per_s_range.0,
        w.gb_per_s_range.1,
        args.reps,
        gb,
        dir.display()
    );
    println!(
        "floor write parts: receiver {}, kworker {}; client sender {:.3} ({}) CPU-s/GB, not in the floor",
        r(w.side_range),
        r(w.kworker_range),
        w.client,
        r(w.client_range)
    );
    println!(
        "floor sendfile: {:.3} CPU-s/GB (sender {:.3} + kworker {:.3}), spread {}, {:.2} GB/s ({:.2}-{:.2})",
        s.total, s.side, s.kworker, r(s.total_range), s.gb_per_s, s.gb_per_s_range.0, s.gb_per_s_range.1
    );
    println!(
        "floor sendfile parts: sender {}, kworker {}; client reader {:.3} ({}) CPU-s/GB, not in the floor",
        r(s.side_range),
        r(s.kworker_range),
        s.client,
        r(s.client_range)
    );

    if let Some(path) = &args.json {
        let json = format!(
            "{{\n  \"gb_per_rep\": {gb:.4},\n  \"reps\": {},\n  \
             \"write_cpu_s_per_gb\": {:.4},\n  \"write_cpu_s_per_gb_min\": {:.4},\n  \"write_cpu_s_per_gb_max\": {:.4},\n  \
             \"write_receiver_cpu_s_per_gb\": {:.4},\n  \"write_kworker_cpu_s_per_gb\": {:.4},\n  \
             \"write_client_sender_cpu_s_per_gb\": {:.4},\n  \"write_gb_per_s\": {:.4},\n  \
             \"sendfile_cpu_s_per_gb\": {:.4},\n  \"sendfile_cpu_s_per_gb_min\": {:.4},\n  \"sendfile_cpu_s_per_gb_max\": {:.4},\n  \
             \"sendfile_sender_cpu_s_per_gb\": {:.4},\n  \"sendfile_kworker_cpu_s_per_gb\": {:.4},\n  \
             \"sendfile_client_reader_cpu_s_per_gb\": {:.4},\n  \"sendfile_gb_per_s\": {:.4}\n}}\n",
            args.reps,
            w.total,
            w.total_range.0,
            w.total_range.1,
            w.side,
            w.kworker,
            w.client,
            w.gb_per_s,
            s.total,
            s.total_range.0,
            s.total_range.1,
            s.side,
            s.kworker,
            s.client,
            s.gb_per_s
        );
        std::fs::write(path, json).with_context(|| format!("write {}", path.display()))?;
    }
    Ok(())
}
