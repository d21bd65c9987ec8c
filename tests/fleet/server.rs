//! A real redis-server for the fleet's tests and benchmark: the one `.ci/run` started
//! (its address in `TCB_REDIS_URL`), or one started here from the `redis-server` binary
//! (on `PATH`, or `TCB_REDIS_SERVER`) on a free loopback port, stopped when dropped.
//!
//! On a machine without one, each test says it is skipped and why, and passes, so that
//! `cargo test` works anywhere; with `TCB_REQUIRE_SERVERS=1` (as `.ci/run` sets it) a
//! missing server fails the test instead.
#![allow(dead_code)] // the benchmark uses a part

use std::io::Write;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How to run these tests, said when they cannot.
const HOW: &str = "the fleet's tests need a real redis-server: install it (Debian: \
    `apt-get install -y redis-server`) so that `redis-server` is on PATH (or name the binary \
    in TCB_REDIS_SERVER), or point TCB_REDIS_URL at a running one (redis://127.0.0.1:PORT); \
    `bash .ci/run` does both";

/// No server to be had: `None` and a line saying the test is skipped, or a failure
/// when servers are required (`TCB_REQUIRE_SERVERS=1`).
fn unavailable<T>(why: &str) -> Option<T> {
    if std::env::var("TCB_REQUIRE_SERVERS").is_ok_and(|v| v == "1") {
        panic!("{why}: {HOW}");
    }
    // Straight to stderr, past the test harness's capture, so the skip is seen.
    let _ = writeln!(std::io::stderr(), "skipped: {why}; {HOW}");
    None
}

/// A server to use: the shared one, or one of our own.
pub struct Redis {
    pub url: String,
    own: Option<RedisServer>,
}

impl Redis {
    /// The server given in `TCB_REDIS_URL`, or a new one of our own; `None` (the test
    /// is skipped) when there is neither.
    pub async fn get() -> Option<Redis> {
        match std::env::var("TCB_REDIS_URL") {
            Ok(url) if !url.is_empty() => Some(Redis { url, own: None }),
            _ => {
                let server = RedisServer::start(&[]).await?;
                Some(Redis {
                    url: server.url(),
                    own: Some(server),
                })
            }
        }
    }
}

/// A key prefix no other test uses, so tests can share one server.
pub fn unique_prefix(test: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "tcbtest-{test}-{}-{}-{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A redis-server process of our own.
pub struct RedisServer {
    port: u16,
    dir: PathBuf,
    args: Vec<String>,
    child: Option<Child>,
}

fn binary() -> String {
    std::env::var("TCB_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into())
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind a loopback port")
        .local_addr()
        .unwrap()
        .port()
}

impl RedisServer {
    /// Starts one on a free loopback port, with these extra arguments
    /// (`["--requirepass", "x"]`), no persistence but what `stop` saves; `None` (the test
    /// is skipped) when there is no `redis-server` to run.
    pub async fn start(extra: &[&str]) -> Option<RedisServer> {
        if let Err(error) = Command::new(binary()).arg("--version").output() {
            return unavailable(&format!("cannot run `{}` ({error})", binary()));
        }
        let dir = std::env::temp_dir().join(format!(
            "tcb-redis-{}",
            unique_prefix("server").trim_start_matches("tcbtest-server-")
        ));
        std::fs::create_dir_all(&dir).expect("make the server's directory");
        let mut server = RedisServer {
            port: 0,
            dir,
            args: extra.iter().map(|a| a.to_string()).collect(),
            child: None,
        };
        // A port found free may be taken before the server binds it: try a few.
        for _ in 0..5 {
            server.port = free_port();
            if server.spawn().await {
                return Some(server);
            }
        }
        panic!("redis-server would not start on a loopback port");
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Starts the process on `self.port`; whether it answers.
    async fn spawn(&mut self) -> bool {
        let child = Command::new(binary())
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let mut child = match child {
            Ok(child) => child,
            Err(error) => panic!("cannot run `{}` ({error}): {HOW}", binary()),
        };
        // Bounded wait for the server to answer.
        for _ in 0..500 {
            if let Ok(Some(_)) = child.try_wait() {
                return false; // exited: the port was taken
            }
            if tokio::net::TcpStream::connect(("127.0.0.1", self.port))
                .await
                .is_ok()
            {
                self.child = Some(child);
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let _ = child.kill();
        let _ = child.wait();
        false
    }

    /// Stops the server, saving its data to its directory first (`SHUTDOWN SAVE`).
    pub async fn stop(&mut self, password: Option<&str>) {
        let mut url = self.url();
        if let Some(password) = password {
            url = format!("redis://:{password}@127.0.0.1:{}", self.port);
        }
        if let Ok(client) = redis::Client::open(url) {
            if let Ok(mut conn) = client.get_multiplexed_async_connection().await {
                let _ = redis::cmd("SHUTDOWN")
                    .arg("SAVE")
                    .query_async::<()>(&mut conn)
                    .await;
            }
        }
        let mut child = self.child.take().expect("the server is running");
        for _ in 0..500 {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("the server is running").id()
    }

    /// Stops the server as an outage would: SIGKILL to its pid, nothing saved. It comes
    /// back ([`restart`](Self::restart)) with what was last saved (`SAVE`), or empty.
    pub fn kill_by_pid(&mut self) {
        let pid = self.pid();
        let killed = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .expect("run kill");
        assert!(killed.success(), "kill -KILL {pid}");
        let mut child = self.child.take().expect("the server is running");
        let _ = child.wait();
    }

    /// Freezes the server (SIGSTOP): the kernel still takes its TCP connections, and
    /// nothing answers on them, as with a Redis stuck in a long command or a stalled VM.
    pub fn freeze(&self) {
        self.signal("-STOP");
    }

    /// Lets a frozen server go on (SIGCONT).
    pub fn thaw(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let pid = self.pid();
        let sent = Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill {signal} {pid}");
    }

    /// Starts it again on the same port, with the data it saved.
    pub async fn restart(&mut self) {
        assert!(self.child.is_none(), "stop it first");
        for _ in 0..50 {
            if self.spawn().await {
                return;
            }
            // The old socket may linger a moment.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("redis-server would not start again on port {}", self.port);
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
