//! Brokers with their own capacity: the relay's bandwidth cap, measured with the real Java
//! producer against the real cluster ([`common::capacity`]; needs the relayed cluster,
//! `scripts/cluster.sh start --relayed`).

mod common;

use common::capacity::*;
use common::*;

/// The cap the test sets, in MB/s per direction.
const CAP: f64 = 5.0;

/// Broker 3 capped at 5 MB/s carries 5 MB/s (within 20%) of produce traffic from a producer
/// that could send far more, and far more again once the cap is removed at runtime.
#[test]
fn a_capped_broker_carries_its_cap() {
    let _serial = serial();
    // every partition led by broker 3 alone (RF 1: no follower traffic shares its link)
    let topic = unique("capacity");
    cluster(&["create-topic", &topic, "--replica-assignment", "3,3,3"]);
    let bootstrap = cluster_bootstrap();

    let capped_broker = CappedBroker::set(3, CAP);
    // 25 MB: about 5 s at the cap; the producer buffers it all at once, so only the link paces it
    let capped = produce_rate(&bootstrap, &topic, 2_500);
    eprintln!("broker 3 capped at {CAP} MB/s: the producer got {capped:.2} MB/s");

    capped_broker.change(0.0);
    let uncapped = produce_rate(&bootstrap, &topic, 4_000);
    eprintln!("broker 3 uncapped: the producer got {uncapped:.2} MB/s");
    drop(capped_broker);

    assert!(
        (capped - CAP).abs() <= 0.2 * CAP,
        "capped at {CAP} MB/s, the producer got {capped:.2} MB/s (not within 20%)"
    );
    assert!(
        uncapped >= 3.0 * CAP,
        "uncapped, the producer got only {uncapped:.2} MB/s: the control does not show the cap \
         was the limit (the machine may be overloaded)"
    );
    let _ = std::process::Command::new(repo_root().join("scripts/cluster.sh"))
        .args(["delete-topic", &topic])
        .output();
}
