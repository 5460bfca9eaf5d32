//! The README's Testcontainers recipes for Java and Go, run for real: each module starts the
//! image built from the broker under test through podman's Docker-compatible socket, as the
//! Python route in `tests/python/test_container.py` does, and the official SDK of that
//! language sends and receives with the connection string the module hands out.
//!
//! - `tests/containers/java`: `ServiceBusEmulatorContainer`, pinned in its `pom.xml` at
//!   `org.testcontainers:azure` 1.21.4 and, with the profile `testcontainers-2`,
//!   `org.testcontainers:testcontainers-azure` 2.0.5; each run by Maven (artifacts in `~/.m2`,
//!   output in `<target>/containers-java-*`).
//! - `tests/containers/go`: `testcontainers-go/modules/azure/servicebus`, pinned in its
//!   `go.mod` and `go.sum` at v0.44.0, run by `go test` (modules in Go's module cache). Its
//!   package `recipe`, the README's testing recipe, needs no container: `go_recipe` runs it.
//!
//! Each test builds its own image with `config/container/build.sh` (about a second) from
//! `TIDEBUS_BIN` if set (to see the tests fail on another build), else the binary under test,
//! starts its own `podman system service` on a socket in a temporary directory, and removes
//! both when it ends. podman comes from `.ci/run`; the machines lacking it fail here, as the
//! Python container tests do. Output and failure as in `runner`.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::prepared::crate_root;
use crate::runner;

/// The first Maven run downloads Testcontainers, the SDK and Maven's plugins; the first Go run
/// downloads and compiles the Docker client and the SDK.
const RUN_DEADLINE: Duration = Duration::from_secs(10 * 60);
/// How long podman's socket may take to appear.
const SOCKET_DEADLINE: Duration = Duration::from_secs(60);

/// `ServiceBusEmulatorContainer` of `org.testcontainers:azure` 1.21.4 (the artifact the
/// README names; Spring Boot 3.5 manages this line): the image with an emulator
/// `Config.json` given by `withConfig`, a send and a receive on that config's queue, and the
/// module's demand for a SQL Server container that the recipe overrides.
#[test]
fn testcontainers_java_azure_1() {
    java("containers-java-1", &[]);
}

/// The same with `org.testcontainers:testcontainers-azure` 2.0.5 (the artifact's name from
/// Testcontainers 2 on; Spring Boot 4 manages this line).
#[test]
fn testcontainers_java_azure_2() {
    java("containers-java-2", &["-Ptestcontainers-2"]);
}

/// `servicebus.Run` of testcontainers-go's Azure module v0.44.0: the image with a
/// `Config.json` given by `WithConfig`, the module's wait (ports 5672 and 5300, `/health`),
/// and azservicebus sending and receiving on the config's queue. The module always starts a
/// SQL Server container first; a second container of the image stands in for it.
#[test]
fn testcontainers_go_servicebus() {
    let image = Image::build();
    let socket = DockerSocket::start();
    let mut command = Command::new("go");
    command
        .current_dir(crate_root().join("tests/containers/go"))
        .args(["test", "-count=1", "-v", "-timeout", "5m", "."]);
    socket.configure(&mut command, &image);
    runner::run(
        "go test (tests/containers/go)",
        &mut command,
        RUN_DEADLINE,
        |code| match code {
            Some(1) => "the Go Testcontainers test failed (or did not build)",
            Some(_) => "go test error",
            None => "killed by a signal",
        },
    );
}

fn java(build_dir: &str, args: &[&str]) {
    let image = Image::build();
    let socket = DockerSocket::start();
    let mut command = runner::maven_test("tests/containers/java", build_dir, args);
    socket.configure(&mut command, &image);
    runner::run(
        "mvn test (tests/containers/java)",
        &mut command,
        RUN_DEADLINE,
        |code| match code {
            Some(1) => "the Java Testcontainers tests failed (or Maven could not resolve them)",
            Some(_) => "Maven error",
            None => "killed by a signal",
        },
    );
}

/// The podman settings of `config/container/containers.conf` (runc, limits under this
/// machine's), for podman and for its socket service alike.
fn containers_conf() -> PathBuf {
    crate_root().join("config/container/containers.conf")
}

fn podman() -> Command {
    let mut command = Command::new("podman");
    command.env("CONTAINERS_CONF", containers_conf());
    command
}

/// An image built from the broker binary by `config/container/build.sh` under a tag of its
/// own, removed when dropped.
struct Image {
    tag: String,
}

impl Image {
    fn build() -> Image {
        let binary = std::env::var_os("TIDEBUS_BIN")
            .map_or_else(|| env!("CARGO_BIN_EXE_tidebus").into(), PathBuf::from);
        let tag = format!("localhost/tidebus:tc-{}-{}", std::process::id(), unique());
        let output = Command::new(crate_root().join("config/container/build.sh"))
            .arg(&binary)
            .env("CONTAINERS_CONF", containers_conf())
            .env("TIDEBUS_IMAGE", &tag)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run config/container/build.sh: {e}"));
        assert!(
            output.status.success(),
            "build.sh {} failed ({}); podman is installed by .ci/run\n{}{}",
            binary.display(),
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        Image { tag }
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        let _ = podman()
            .args(["rmi", "-f", &self.tag])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// `podman system service` on a socket in a temporary directory: the Docker-compatible API
/// the Testcontainers libraries are pointed at with `DOCKER_HOST`. Stopped when dropped.
struct DockerSocket {
    service: Child,
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl DockerSocket {
    fn start() -> DockerSocket {
        let dir = tempfile::tempdir().expect("temporary directory");
        let socket = dir.path().join("podman.sock");
        let mut service = podman()
            .args(["system", "service", "--time=0"])
            .arg(format!("unix://{}", socket.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start podman (installed by .ci/run): {e}"));
        let started = Instant::now();
        while !socket.exists() {
            if let Some(status) = service.try_wait().expect("try_wait") {
                panic!("podman system service exited with {status} before its socket appeared");
            }
            if started.elapsed() > SOCKET_DEADLINE {
                let _ = service.kill();
                let _ = service.wait();
                panic!(
                    "podman's socket {} did not appear in time",
                    socket.display()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        DockerSocket {
            service,
            socket,
            _dir: dir,
        }
    }

    /// Points `command`'s Testcontainers at this socket and the image.
    fn configure(&self, command: &mut Command, image: &Image) {
        command
            .env("DOCKER_HOST", format!("unix://{}", self.socket.display()))
            .env("TIDEBUS_IMAGE", &image.tag)
            .env("CONTAINERS_CONF", containers_conf())
            // No reaper container: its image would come from Docker Hub, and each test stops
            // and removes its own containers.
            .env("TESTCONTAINERS_RYUK_DISABLED", "true")
            // The test machines are containers themselves (/.dockerenv): without this both
            // libraries dial the bridge's gateway instead of the loopback ports podman
            // publishes. On an ordinary host they find localhost by themselves.
            .env("TESTCONTAINERS_HOST_OVERRIDE", "127.0.0.1");
    }
}

impl Drop for DockerSocket {
    fn drop(&mut self) {
        // SIGTERM by pid (the service's own child): podman exits cleanly on it.
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.service.id().to_string())
            .status();
        let started = Instant::now();
        while matches!(self.service.try_wait(), Ok(None)) {
            if started.elapsed() > SOCKET_DEADLINE {
                let _ = self.service.kill();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.service.wait();
    }
}

/// A number no other test of this process gets.
fn unique() -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
