//! A broker killed while a Java producer sends with acks=all through kroute (RF 3,
//! min.insync.replicas 2): nothing acknowledged is lost, the producer does not hang, and other
//! connections keep working. Runs in its own test binary, so no other test shares the outage.

mod common;

use std::collections::BTreeSet;
use std::io::Write;
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use common::*;
use kafka_protocol::messages::{ApiKey, MetadataRequest};

/// Restarts the killed broker when the test fails half-way, so the cluster is left as found.
struct RestartOnDrop(&'static str);

impl Drop for RestartOnDrop {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let _ = Command::new(repo_root().join("scripts/cluster.sh"))
            .args(["start-broker", self.0])
            .status();
    }
}

#[test]
fn broker_killed_while_producing_loses_nothing_acknowledged() {
    let kroute = Kroute::start();
    let topic = unique("failover");
    create_topic(&topic, 6, &["min.insync.replicas=2"]);

    let bootstrap = kroute.bootstrap.clone();
    let producing_topic = topic.clone();
    let producer = std::thread::spawn(move || {
        java(&[
            "produce",
            "--bootstrap",
            &bootstrap,
            "--topic",
            &producing_topic,
            "--count",
            "60000",
            "--record-size",
            "1024",
            "--acks",
            "all",
            "--id-prefix",
            "fo-",
            "--timeout-ms",
            "120000",
        ])
    });

    // Kill broker 2 once the producer is well under way through kroute.
    wait_for(
        "produce traffic through kroute",
        Duration::from_secs(60),
        || (kroute.metric("kroute_requests_total", &["api=\"Produce\""]) >= 20.0).then_some(()),
    );
    let _restart = RestartOnDrop("2");
    cluster(&["kill-broker", "2"]);

    // Another client connection, to a surviving broker's kroute address, is unaffected.
    let mut other = TcpStream::connect(format!("127.0.0.1:{}", kroute.port_base + 1)).unwrap();
    other
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    other
        .write_all(&request_frame(
            ApiKey::Metadata,
            12,
            1,
            &MetadataRequest::default().with_topics(None),
        ))
        .unwrap();
    assert!(
        read_frame(&mut other).is_some(),
        "surviving broker's connection broken"
    );

    let run = producer.join().unwrap();
    run.assert_ok();
    let acked: BTreeSet<String> = run
        .records("ack")
        .into_iter()
        .map(|r| r["id"].clone())
        .collect();
    assert_eq!(acked.len(), run.count("produced"));
    assert_eq!(run.count("errors"), 0);
    assert!(
        kroute.metric("kroute_upstream_disconnects_total", &["broker=\"2\""]) >= 1.0,
        "broker 2's connections saw no in-flight loss"
    );

    // The fenced broker leaves kroute's cluster view, and its listener closes; when the broker
    // comes back, the listener is there again, without a kroute restart.
    let broker2 = format!("127.0.0.1:{}", kroute.port_base + 2);
    wait_for(
        "broker 2's kroute listener to close",
        Duration::from_secs(60),
        || TcpStream::connect(&broker2).is_err().then_some(()),
    );
    cluster(&["start-broker", "2"]);
    wait_for(
        "broker 2's kroute listener to return",
        Duration::from_secs(60),
        || TcpStream::connect(&broker2).ok().map(|_| ()),
    );
    let consumed = java_on(
        "consume",
        &kroute.bootstrap,
        &topic,
        &[
            "--expect",
            &acked.len().to_string(),
            "--timeout-ms",
            "120000",
        ],
    );
    let got: BTreeSet<String> = consumed
        .records("rec")
        .into_iter()
        .map(|r| r["id"].clone())
        .collect();
    let lost: Vec<&String> = acked.difference(&got).take(10).collect();
    assert!(lost.is_empty(), "acknowledged records lost: {lost:?}");
    kroute.assert_clean_logs(&[
        "upstream connection ended with requests in flight",
        "closing client connection: no upstream broker",
        "metadata refresh failed",
    ]);
}
