//! Power cuts (issue 50; README, Durability): the broker's data on a file system that keeps only
//! what was synced ([`crate::powercut_fs`]: sled's `sync_file_range` counts as no sync), and a
//! crash that is `kill -9` and then the power cut, which drops every unsynced write or keeps a
//! torn prefix of them. The workloads and invariants are those of the `kill -9` tests, run on
//! that disk: nothing acknowledged lost, nothing confirmed settled back, no sequence number
//! handed out twice, a start after a torn tail. The official Python SDK adds what the Rust
//! clients do not: scheduled messages and cancels, session state, a partitioned queue and
//! queues created and deleted at run time.
//!
//! Where FUSE cannot be used the tests say so on the console and pass as skipped.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::child::Disk;
use crate::powercut_fs::Cut;
use crate::support::DEADLINE;

/// The seed of a torn cut: `TIDEBUS_POWERCUT_SEED` to replay one, else the clock; printed.
fn torn() -> Cut {
    let seed = std::env::var("TIDEBUS_POWERCUT_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |now| now.as_nanos() as u64)
        });
    println!("torn cuts seeded with TIDEBUS_POWERCUT_SEED={seed}");
    Cut::TornTail { seed }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_power_cut_mid_load_loses_no_acknowledged_send_or_confirmed_completion() {
    let test = "a_power_cut_mid_load_loses_no_acknowledged_send_or_confirmed_completion";
    if let Some(disk) = Disk::cutting_power(test, Cut::DropUnsynced) {
        crate::durability::crash_mid_load(disk).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_torn_tail_mid_load_loses_no_acknowledged_send_and_the_broker_starts() {
    let test = "a_torn_tail_mid_load_loses_no_acknowledged_send_and_the_broker_starts";
    if let Some(disk) = Disk::cutting_power(test, torn()) {
        crate::durability::crash_mid_load(disk).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_power_cut_under_topic_load_keeps_each_acknowledged_send_in_its_subscriptions() {
    let test = "a_power_cut_under_topic_load_keeps_each_acknowledged_send_in_its_subscriptions";
    if let Some(disk) = Disk::cutting_power(test, torn()) {
        crate::durability::crash_under_topic_load(disk).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_power_cut_keeps_deferred_and_dead_lettered_messages_where_they_were() {
    let test = "a_power_cut_keeps_deferred_and_dead_lettered_messages_where_they_were";
    if let Some(disk) = Disk::cutting_power(test, Cut::DropUnsynced) {
        crate::durability::crash_after_settlements(disk).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_cuts_during_commits_leave_every_transaction_whole_or_absent() {
    let test = "power_cuts_during_commits_leave_every_transaction_whole_or_absent";
    if let Some(disk) = Disk::cutting_power(test, torn()) {
        crate::transactions::crashes_during_commits(disk).await;
    }
}

/// `interval` mode may lose at most its interval, on a power cut too: once a periodic flush
/// began after the last acknowledged send, a power cut loses none of them; and a clean stop
/// syncs, so a power cut right after it loses nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interval_mode_loses_nothing_older_than_its_interval_or_a_clean_stop_to_a_power_cut() {
    use crate::durability::{drain, send_ids};
    let test = "interval_mode_loses_nothing_older_than_its_interval_or_a_clean_stop_to_a_power_cut";
    let Some(disk) = Disk::cutting_power(test, Cut::DropUnsynced) else {
        return;
    };
    let config = "[broker]\ndurability = \"interval\"\nflush_interval = \"100ms\"\n\
                  allow_anonymous = true\n\n[[queues]]\nname = \"q\"\n";
    let broker = disk.start(config);
    assert_eq!(send_ids(broker.addr, 0..2000).await.len(), 2000);
    // The sync after next belongs to a flush that began after the last acknowledgement.
    let synced = disk.file_syncs();
    let started = Instant::now();
    while disk.file_syncs() < synced + 2 {
        assert!(started.elapsed() < DEADLINE, "no periodic sync");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    disk.crash(broker);
    let broker = disk.start(config);
    assert_eq!(
        drain(broker.addr, "q", &(0..2000).collect()).await.len(),
        2000
    );
    assert_eq!(send_ids(broker.addr, 5000..5500).await.len(), 500);
    disk.stop(broker);
    let broker = disk.start(config);
    assert_eq!(
        drain(broker.addr, "q", &(5000..5500).collect()).await.len(),
        500
    );
}

/// The official Python SDK's work ([`WORKLOAD`]) through three power cuts, each after at least
/// [`DONE_PER_ROUND`] more acknowledged operations, and checked after each restart.
#[test]
fn the_python_sdk_s_schedules_cancels_session_state_partitions_and_created_queues_survive_power_cuts(
) {
    let test = "the_python_sdk_s_schedules_cancels_session_state_partitions_and_created_queues_survive_power_cuts";
    let Some(disk) = Disk::cutting_power(test, torn()) else {
        return;
    };
    let config = sdk_config(disk.path());
    let facts = disk.path().join("facts.jsonl");
    let mut broker = disk.start(&config);
    for round in 0..3 {
        if round > 0 {
            check(&broker, disk.path(), round);
        }
        let mut load = run_workload(&broker, disk.path(), "load", round);
        let started = Instant::now();
        while done_count(&facts) < DONE_PER_ROUND * (round + 1) {
            if let Some(status) = load.try_wait().expect("try_wait") {
                panic!("the load stopped before the crash ({status})");
            }
            assert!(
                started.elapsed() < DEADLINE * 2,
                "too few operations acknowledged"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        disk.crash(broker);
        let status = load.wait().expect("load");
        assert!(status.success(), "the load of round {round} failed");
        broker = disk.start(&config);
    }
    check(&broker, disk.path(), 3);
}

/// Runs [`WORKLOAD`]'s check of what survived until `round`; panics unless every check held.
fn check(broker: &crate::child::ChildBroker, dir: &Path, round: usize) {
    let status = run_workload(broker, dir, "check", round)
        .wait()
        .expect("check");
    assert!(status.success(), "the check after round {round} failed");
}

/// The script of the official Python SDK's work.
const WORKLOAD: &str = "tests/python/powercut_workload.py";
/// Operations acknowledged in each round before the crash.
const DONE_PER_ROUND: usize = 60;

/// A `sync` broker with the emulator's policy, TLS (the SDK's administration client speaks
/// only HTTPS) and the entities [`WORKLOAD`] uses; its certificates made in `dir`.
fn sdk_config(dir: &Path) -> String {
    let certificates = dir.join("certs");
    let made = Command::new(env!("CARGO_BIN_EXE_tidebus"))
        .args(["gen-cert", "--host", "localhost", "--out"])
        .arg(&certificates)
        .output()
        .expect("gen-cert");
    assert!(made.status.success(), "gen-cert: {made:?}");
    format!(
        "[broker]\ndurability = \"sync\"\nallow_anonymous = false\n\n\
         [broker.tls]\nlisten = \"127.0.0.1:0\"\ncert = \"{}\"\nkey = \"{}\"\n\n\
         [[shared_access_policies]]\nname = \"RootManageSharedAccessKey\"\n\
         key = \"SAS_KEY_VALUE\"\nrights = [\"Manage\", \"Send\", \"Listen\"]\n\n\
         [[queues]]\nname = \"part\"\npartitions = 4\n\n\
         [[queues]]\nname = \"sched\"\n\n\
         [[queues]]\nname = \"sess\"\nrequires_session = true\n",
        certificates.join("server.pem").display(),
        certificates.join("server-key.pem").display(),
    )
}

/// [`WORKLOAD`]'s `command` against `broker`, its output on the console.
fn run_workload(
    broker: &crate::child::ChildBroker,
    dir: &Path,
    command: &str,
    round: usize,
) -> Child {
    let admin = broker.admin_addr.expect("an administration endpoint");
    Command::new(crate::pyenv::shared().python())
        .arg(crate::prepared::crate_root().join(WORKLOAD))
        .arg(command)
        .arg(broker.addr.port().to_string())
        .arg(admin.port().to_string())
        .arg(dir.join("certs").join("ca.pem"))
        .arg(dir.join("facts.jsonl"))
        .arg(round.to_string())
        .stdin(Stdio::null())
        .spawn()
        .expect("python")
}

/// How many operations the facts file says were acknowledged.
fn done_count(facts: &Path) -> usize {
    std::fs::read_to_string(facts)
        .unwrap_or_default()
        .lines()
        .filter(|line| line.contains("\"done\": true"))
        .count()
}
