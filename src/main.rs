//! The `tidebus` command: parse arguments, set up logging, load the config, bind the listener
//! and hand over to [`tidebus::run`]. No broker logic lives here.

use std::future::Future;
use std::io::{self, IsTerminal, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use tidebus::config::{Config, ConfigError, LogFormat, DEFAULT_CONFIG_TOML};
use tidebus::{admin_call, container};
use tidebus::{Bound, Listeners};
use tokio::net::TcpListener;
use tokio::signal::unix::{signal, SignalKind};
use tracing::level_filters::LevelFilter;
use tracing_subscriber::EnvFilter;

/// Exit status when the config cannot be loaded; clap uses the same for bad arguments.
const EXIT_CONFIG_ERROR: u8 = 2;

/// A durable AMQP 1.0 message broker with Azure Service Bus semantics.
///
/// With no subcommand, runs the broker until SIGINT or SIGTERM.
#[derive(Parser)]
#[command(version, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(flatten)]
    run: RunArgs,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Args)]
struct RunArgs {
    /// Config file (TOML). Without it the embedded default is used (see print-default-config).
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    /// Address to listen on, as IP:port; overrides `broker.listen`.
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
    /// Address of the administration endpoint, as IP:port; overrides `admin.listen`.
    #[arg(long, value_name = "ADDR")]
    admin_listen: Option<SocketAddr>,
    /// Directory of the message store; overrides `broker.data_dir`.
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// File that receives the bound addresses once the broker accepts connections, written
    /// atomically: the plain listener's (e.g. 127.0.0.1:5672) on the first line, then
    /// "tls ADDR" for the TLS listener, "websocket ADDR" for each WebSocket listener and
    /// "admin ADDR" for the administration endpoint.
    #[arg(long, value_name = "PATH")]
    ready_file: Option<PathBuf>,
    /// Run as the container image does, in place of Microsoft's emulator: without --config the
    /// emulator's /ServiceBus_Emulator/ConfigFiles/Config.json when it exists; loopback
    /// listeners on all interfaces, WebSockets on 80 and 443, the store in /data; the
    /// emulator's SQL Server variables ignored; its ready line logged.
    #[arg(long)]
    container: bool,
    /// Testing features to turn on, comma-separated, beside `[testing]`: `reset`, `clock` (the
    /// controlled clock), and `exposed` to allow them with TLS or a listener beyond loopback.
    #[arg(long, value_name = "FEATURES", env = "TIDEBUS_TESTING")]
    testing: Option<String>,
}

#[derive(Subcommand)]
enum Command {
    /// Validate a config file: prints "PATH: ok (N queues, M topics)" and exits 0, or prints the error
    /// and exits 2.
    CheckConfig {
        /// The config file to check.
        path: PathBuf,
    },
    /// Print the embedded default config, every key commented.
    PrintDefaultConfig,
    /// Ask the administration endpoint for /health over plain HTTP: exits 0 when it answers
    /// 200, else prints why and exits 1 (the container image's health check).
    Health {
        /// The administration endpoint's address.
        #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:5300")]
        admin: SocketAddr,
    },
    /// Reset a running broker's namespace to what its config declares (`[testing] reset`
    /// must be on): POST /$testing/reset on the administration endpoint over plain HTTP,
    /// signed with a policy's key. Prints the answer; exits 0 once the reset is durable, else
    /// prints why and exits 1.
    Reset {
        /// The administration endpoint's address.
        #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:5300")]
        admin: SocketAddr,
        /// The policy (with the Manage right) whose key signs the call.
        #[arg(long, value_name = "NAME", default_value = "RootManageSharedAccessKey")]
        key_name: String,
        /// The policy's key; without it the call is unsigned (a broker that lets anonymous
        /// clients in takes it).
        #[arg(long, value_name = "KEY", env = "TIDEBUS_KEY", hide_env_values = true)]
        key: Option<String>,
    },
    /// Write a development CA and a server certificate it signs, for `[broker.tls]`:
    /// DIR/ca.pem (trust it in clients), DIR/server.pem and DIR/server-key.pem (the broker's).
    GenCert {
        /// A host name or IP address the certificate is valid for; repeat for more.
        #[arg(long = "host", value_name = "HOST", default_values_t = [String::from("localhost"), String::from("127.0.0.1")])]
        hosts: Vec<String>,
        /// Directory to write the three files to, created if absent.
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::CheckConfig { path }) => check_config(&path),
        Some(Command::PrintDefaultConfig) => write_stdout(DEFAULT_CONFIG_TOML),
        Some(Command::GenCert { hosts, out }) => gen_cert(&hosts, &out),
        Some(Command::Health { admin }) => match admin_call::health(admin).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(why) => {
                eprintln!("unhealthy: {why}");
                ExitCode::FAILURE
            }
        },
        Some(Command::Reset {
            admin,
            key_name,
            key,
        }) => match admin_call::reset(admin, &key_name, key.as_deref()).await {
            Ok(answer) => write_stdout(&format!("{answer}\n")),
            Err(why) => {
                eprintln!("reset failed: {why}");
                ExitCode::FAILURE
            }
        },
        None => run_broker(cli.run).await,
    }
}

fn check_config(path: &Path) -> ExitCode {
    match Config::load(path) {
        Ok(config) => write_stdout(&format!(
            "{}: ok ({} queues, {} topics)\n",
            path.display(),
            config.queues.len(),
            config.topics.len()
        )),
        Err(error) => config_error(&error),
    }
}

fn gen_cert(hosts: &[String], out: &Path) -> ExitCode {
    match tidebus::transport::tls::generate_dev_certificates(hosts, out) {
        Ok(written) => {
            let listed: Vec<String> = written.iter().map(|p| p.display().to_string()).collect();
            write_stdout(&format!(
                "wrote {} (for {})\n",
                listed.join(", "),
                hosts.join(", ")
            ))
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run_broker(args: RunArgs) -> ExitCode {
    let mut config = match load_config(&args) {
        Ok(config) => config,
        Err(error) => return config_error(&error),
    };
    let testing = match &args.testing {
        Some(list) => config.testing.enable(list),
        None => Ok(()),
    };
    if let Err(why) = testing.and_then(|()| config.check_testing_exposure()) {
        eprintln!("error: {why}");
        return ExitCode::from(EXIT_CONFIG_ERROR);
    }
    init_tracing(config.broker.log_format);
    if args.container {
        let ignored = container::ignored_environment();
        if !ignored.is_empty() {
            tracing::info!(
                variables = %ignored.join(", "),
                "ignoring the emulator's SQL Server settings: Tidebus keeps its own store"
            );
        }
    }
    match serve(config, args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

/// The config file (or the embedded default), adapted to a container with `--container`,
/// with the command-line overrides applied.
fn load_config(args: &RunArgs) -> Result<Config, ConfigError> {
    let path = match args.container {
        true => container::config_path(args.config.clone()),
        false => args.config.clone(),
    };
    let mut config = match &path {
        Some(path) => Config::load(path)?,
        None => Config::embedded_default(),
    };
    if args.container {
        container::adapt(&mut config);
    }
    if let Some(listen) = args.listen {
        config.broker.listen = Some(listen);
    }
    if let Some(listen) = args.admin_listen {
        config.admin.listen = Some(listen);
    }
    if let Some(data_dir) = &args.data_dir {
        config.broker.data_dir = data_dir.clone();
    }
    Ok(config)
}

/// Binds, then runs the broker until SIGINT or SIGTERM.
async fn serve(config: Config, args: RunArgs) -> Result<(), String> {
    // Read the certificate and bind before anything starts, so a bad file or a bad or busy
    // address fails at once.
    let plain = match config.broker.listen {
        Some(listen) => Some(bind(listen).await?),
        None => None,
    };
    let tls = match &config.broker.tls {
        Some(tls) => {
            let acceptor =
                tidebus::transport::tls::acceptor(tls).map_err(|e| format!("TLS: {e}"))?;
            Some((bind(tls.listen).await?, acceptor))
        }
        None => None,
    };
    let mut websocket = Vec::with_capacity(config.broker.websocket_listen.len());
    for &listen in &config.broker.websocket_listen {
        websocket.push(bind(listen).await?);
    }
    let admin = match config.admin.listen {
        Some(listen) => Some(bind(listen).await?),
        None => None,
    };
    let installed = |e: io::Error| format!("cannot install the signal handlers: {e}");
    let shutdown = shutdown_signal().map_err(installed)?;
    let ready_file = args.ready_file.clone();
    let container = args.container;
    let reloads = reload_signal(args).map_err(installed)?;
    let listeners = Listeners {
        plain,
        tls,
        websocket,
        admin,
    };
    tidebus::run_with_reloads(config, listeners, shutdown, reloads, move |bound| {
        if container {
            tracing::info!("{}", container::READY_LINE);
        }
        if let Some(path) = ready_file {
            if let Err(error) = write_ready_file(&path, bound) {
                tracing::error!(path = %path.display(), %error, "cannot write the ready file");
            }
        }
    })
    .await
    .map_err(|e| format!("broker stopped: {e}"))
}

async fn bind(address: SocketAddr) -> Result<TcpListener, String> {
    TcpListener::bind(address)
        .await
        .map_err(|e| format!("cannot listen on {address}: {e}"))
}

/// Resolves on the first SIGINT or SIGTERM. The handlers are installed by this call, before
/// the broker starts, so a failure to install them is a startup error.
fn shutdown_signal() -> io::Result<impl Future<Output = ()>> {
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    Ok(async move {
        let name = tokio::select! {
            _ = interrupt.recv() => "SIGINT",
            _ = terminate.recv() => "SIGTERM",
        };
        tracing::info!(signal = name, "shutdown requested");
    })
}

/// On each SIGHUP, reads the config file again (with the command line's overrides) and
/// passes it on to be applied; a file with an error changes nothing and is logged with its
/// position.
fn reload_signal(args: RunArgs) -> io::Result<tokio::sync::mpsc::Receiver<Config>> {
    let mut hangup = signal(SignalKind::hangup())?;
    // A reload waits for the one before it to be applied.
    let (reloads, received) = tokio::sync::mpsc::channel(1);
    tokio::spawn(async move {
        while hangup.recv().await.is_some() {
            tracing::info!("SIGHUP: reloading the configuration");
            match load_config(&args) {
                Ok(config) => {
                    if reloads.send(config).await.is_err() {
                        return;
                    }
                }
                Err(error) => {
                    tracing::error!(%error, "reload refused: the file has an error, nothing changed")
                }
            }
        }
    });
    Ok(received)
}

/// Writes the bound addresses to `path` (the plain one on the first line, then `tls ADDR`,
/// `websocket ADDR` for each WebSocket listener and `admin ADDR`) through a temporary file
/// renamed over it, so a reader never sees a partial address.
fn write_ready_file(path: &Path, bound: Bound) -> io::Result<()> {
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".tmp");
    let plain = bound.plain.map(|addr| format!("{addr}\n"));
    let tls = bound.tls.map(|addr| format!("tls {addr}\n"));
    let websocket = bound
        .websocket
        .iter()
        .map(|addr| format!("websocket {addr}\n"));
    let admin = bound.admin.map(|addr| format!("admin {addr}\n"));
    let lines: String = plain
        .into_iter()
        .chain(tls)
        .chain(websocket)
        .chain(admin)
        .collect();
    std::fs::write(&temporary, lines)?;
    std::fs::rename(&temporary, path)
}

/// Logs to stderr, filtered by `RUST_LOG` (default `info`), as text (colours only on a
/// terminal) or one JSON object per line.
fn init_tracing(format: LogFormat) {
    let filter = EnvFilter::builder()
        .with_default_directive(LevelFilter::INFO.into())
        .from_env_lossy();
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(io::stderr);
    let set = match format {
        LogFormat::Text => subscriber.with_ansi(io::stderr().is_terminal()).try_init(),
        LogFormat::Json => subscriber
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .try_init(),
    };
    if let Err(error) = set {
        eprintln!("warning: logging is not set up: {error}");
    }
}

fn config_error(error: &ConfigError) -> ExitCode {
    eprintln!("error: {error}");
    ExitCode::from(EXIT_CONFIG_ERROR)
}

/// Writes `text` to stdout; a closed stdout (e.g. `| head`) is reported, not a panic.
fn write_stdout(text: &str) -> ExitCode {
    match io::stdout().lock().write_all(text.as_bytes()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: cannot write to stdout: {error}");
            ExitCode::FAILURE
        }
    }
}
