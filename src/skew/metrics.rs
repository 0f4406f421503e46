//! The skew report as Prometheus gauges, rendered at each scrape from the last samples (their
//! labels come and go with topics, brokers and group members, which pre-registered handles
//! cannot follow). Series: one per broker and class, one per topic and broker, one per group
//! member; bounded by the cluster's size and `lag.max_groups`.

use std::fmt::Write;

use super::report::SkewReport;
use crate::lag::metrics::escape;

/// Every family rendered: name, help.
const FAMILIES: [(&str, &str); 9] = [
    (
        "kroute_skew_broker_partitions_led",
        "Partitions the broker leads.",
    ),
    (
        "kroute_skew_broker_records_per_second",
        "Records/s appended to the partitions the broker leads, by every producer (log ends).",
    ),
    (
        "kroute_skew_broker_produce_bytes_per_second",
        "Produce bytes/s through this kroute to the broker, by what routing did with them.",
    ),
    (
        "kroute_skew_broker_unmovable_ratio",
        "Share of the bytes routing looked at that could not move (keyed or pinned).",
    ),
    (
        "kroute_skew_topic_leaders",
        "Partitions of the topic the broker leads.",
    ),
    (
        "kroute_skew_topic_max_over_even_ratio",
        "The most partitions of the topic any broker leads, over an even spread.",
    ),
    (
        "kroute_skew_group_member_partitions",
        "Partitions the group member owns.",
    ),
    (
        "kroute_skew_group_member_lag_messages",
        "Lag of the partitions the group member owns.",
    ),
    (
        "kroute_skew_group_member_overloaded",
        "1 if the member carries more than skew.member_margin above the group's mean.",
    ),
];

/// The gauges' text.
pub fn render(report: &SkewReport) -> String {
    let mut families: Vec<String> = vec![String::new(); FAMILIES.len()];
    let mut put = |family: usize, labels: &str, value: f64| {
        let name = FAMILIES[family].0;
        let _ = writeln!(families[family], "{name}{{{labels}}} {value}");
    };
    for b in &report.brokers {
        let labels = format!("broker=\"{}\"", b.id);
        put(0, &labels, b.partitions_led as f64);
        if let Some(r) = b.records_per_s {
            put(1, &labels, r);
        }
        for (class, rate) in b.produce_bytes_per_s.iter().flatten() {
            put(2, &format!("{labels},class=\"{class}\""), *rate);
        }
        if let Some(share) = b.unmovable_share {
            put(3, &labels, share);
        }
    }
    for t in &report.topics {
        let topic = format!("topic=\"{}\"", escape(&t.topic));
        for (broker, led) in &t.leaders {
            put(4, &format!("{topic},broker=\"{broker}\""), *led as f64);
        }
        put(5, &topic, t.max_over_even);
    }
    for g in &report.groups {
        for m in &g.members {
            let labels = format!(
                "group=\"{}\",owner=\"{}\",client_id=\"{}\"",
                escape(&g.group),
                escape(&m.owner),
                escape(&m.client_id)
            );
            put(6, &labels, m.partitions as f64);
            put(7, &labels, m.lag as f64);
            put(8, &labels, f64::from(u8::from(m.overloaded)));
        }
    }
    let mut out = String::new();
    for ((name, help), lines) in FAMILIES.iter().zip(families) {
        if !lines.is_empty() {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
            out.push_str(&lines);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::skew::report::{BrokerReport, GroupReport, MemberReport, TopicReport};

    #[test]
    fn renders_brokers_topics_and_members() {
        let report = SkewReport {
            sampled_at_ms: 1,
            window_s: Some(1.0),
            brokers: vec![BrokerReport {
                id: 2,
                partitions_led: 22,
                replicas: 30,
                records_per_s: Some(5.0),
                records_share: Some(1.0),
                produce_bytes_per_s: Some(BTreeMap::from([("keyed", 7.0)])),
                cost_ms: None,
                unmovable_share: Some(0.5),
            }],
            topics: vec![TopicReport {
                topic: "a\"b".into(),
                partitions: 3,
                leaders: BTreeMap::from([(2, 3)]),
                even: 3.0,
                max_over_even: 1.0,
                records_per_s: None,
            }],
            groups: vec![GroupReport {
                group: "g".into(),
                status: "OK".into(),
                members: vec![MemberReport {
                    owner: "/h".into(),
                    client_id: "c".into(),
                    partitions: 3,
                    lag: 4,
                    overloaded: true,
                }],
                mean_partitions: 3.0,
                mean_lag: 4.0,
                skewed: true,
            }],
        };
        let text = render(&report);
        assert!(text.contains("kroute_skew_broker_partitions_led{broker=\"2\"} 22\n"));
        assert!(text.contains(
            "kroute_skew_broker_produce_bytes_per_second{broker=\"2\",class=\"keyed\"} 7\n"
        ));
        assert!(text.contains("kroute_skew_topic_leaders{topic=\"a\\\"b\",broker=\"2\"} 3\n"));
        assert!(text.contains(
            "kroute_skew_group_member_overloaded{group=\"g\",owner=\"/h\",client_id=\"c\"} 1\n"
        ));
        assert_eq!(text.matches("# TYPE ").count(), FAMILIES.len());
    }
}
