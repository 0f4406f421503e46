#!/usr/bin/env python3
"""Generates docker/grafana/dashboards/kroute.json, the Grafana dashboard for kroute.

    python3 docker/grafana/dashboard.py          # rewrite the JSON
    python3 docker/grafana/dashboard.py --check  # exit 1 if the committed JSON differs

Standard library only. The JSON is the dashboard model Grafana 10+ reads (schemaVersion 39);
every query goes to the datasource with uid "prometheus" (provisioning/datasources). Queries
use $instance (the kroute instances to show, all by default) and $__rate_interval.
tests/prometheus.rs checks the JSON's structure and runs every query against a real Prometheus
scraping kroute under load.
"""

import json
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent / "dashboards" / "kroute.json"
DATASOURCE = {"type": "prometheus", "uid": "prometheus"}
SEL = 'instance=~"$instance"'
RI = "$__rate_interval"


def rate(metric, matchers="", by=None):
    """sum [by (...)] (rate(metric{instance, matchers}[$__rate_interval]))"""
    inner = f"rate({metric}{{{SEL}{', ' + matchers if matchers else ''}}}[{RI}])"
    return f"sum by ({', '.join(by)}) ({inner})" if by else f"sum({inner})"


def target(expr, legend, ref):
    return {
        "datasource": DATASOURCE,
        "expr": expr,
        "legendFormat": legend,
        "range": True,
        "refId": ref,
    }


class Layout:
    """Places panels left to right in rows of 24 columns; ids in order of appearance."""

    def __init__(self):
        self.panels = []
        self.x = 0
        self.y = 0
        self.row_h = 0

    def _next_id(self):
        return len(self.panels) + 1

    def row(self, title):
        self._wrap()
        self.panels.append(
            {
                "type": "row",
                "id": self._next_id(),
                "title": title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y},
                "panels": [],
            }
        )
        self.y += 1

    def _wrap(self):
        self.y += self.row_h
        self.x = 0
        self.row_h = 0

    def _place(self, w, h):
        if self.x + w > 24:
            self._wrap()
        pos = {"h": h, "w": w, "x": self.x, "y": self.y}
        self.x += w
        self.row_h = max(self.row_h, h)
        return pos

    def timeseries(self, title, description, unit, targets, w=12, h=8, stack=False, minimum=0):
        defaults = {
            "unit": unit,
            "custom": {
                "drawStyle": "line",
                "lineWidth": 1,
                "fillOpacity": 20 if stack else 10,
                "showPoints": "never",
                "spanNulls": False,
                "stacking": {"mode": "normal" if stack else "none", "group": "A"},
            },
        }
        if minimum is not None:
            defaults["min"] = minimum
        self.panels.append(
            {
                "type": "timeseries",
                "id": self._next_id(),
                "title": title,
                "description": description,
                "datasource": DATASOURCE,
                "gridPos": self._place(w, h),
                "fieldConfig": {"defaults": defaults, "overrides": []},
                "options": {
                    "legend": {
                        "showLegend": True,
                        "displayMode": "table",
                        "placement": "bottom",
                        "calcs": ["mean", "max", "lastNotNull"],
                    },
                    "tooltip": {"mode": "multi", "sort": "desc"},
                },
                "targets": [target(e, l, chr(ord("A") + i)) for i, (e, l) in enumerate(targets)],
            }
        )

    def stat(self, title, description, unit, targets, w=6, h=4, thresholds=None):
        steps = thresholds or [{"color": "green", "value": None}]
        self.panels.append(
            {
                "type": "stat",
                "id": self._next_id(),
                "title": title,
                "description": description,
                "datasource": DATASOURCE,
                "gridPos": self._place(w, h),
                "fieldConfig": {
                    "defaults": {
                        "unit": unit,
                        "thresholds": {"mode": "absolute", "steps": steps},
                    },
                    "overrides": [],
                },
                "options": {
                    "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                    "colorMode": "value",
                    "graphMode": "area",
                    "justifyMode": "auto",
                    "orientation": "auto",
                    "textMode": "auto",
                },
                "targets": [target(e, l, chr(ord("A") + i)) for i, (e, l) in enumerate(targets)],
            }
        )


def build():
    d = Layout()

    d.row("Overview")
    d.stat(
        "Ready",
        "kroute_ready: 1 while /ready answers 200 (kroute knows the cluster and is not shutting down).",
        "none",
        [(f"min(kroute_ready{{{SEL}}})", "ready")],
        thresholds=[{"color": "red", "value": None}, {"color": "green", "value": 1}],
    )
    d.stat(
        "Brokers known",
        "Brokers in kroute's cluster view, each with a listener (kroute_brokers_known).",
        "none",
        [(f"max(kroute_brokers_known{{{SEL}}})", "brokers")],
    )
    d.stat(
        "Client connections",
        "Client connections open now, all selected instances (kroute_client_connections_active).",
        "none",
        [(f"sum(kroute_client_connections_active{{{SEL}}})", "connections")],
    )
    d.stat(
        "Certificate expires in",
        "Time until the first of kroute's certificates (listener, upstream client) expires "
        "(kroute_tls_certificate_expiry_timestamp_seconds). No data without TLS certificates.",
        "s",
        [(f"min(kroute_tls_certificate_expiry_timestamp_seconds{{{SEL}}} - time())", "expires in")],
        thresholds=[
            {"color": "red", "value": None},
            {"color": "orange", "value": 3 * 86400},
            {"color": "green", "value": 14 * 86400},
        ],
    )

    d.row("Brokers")
    d.timeseries(
        "Produce latency p99 by broker",
        "99th percentile of kroute's Produce round trips to each broker "
        "(kroute_upstream_request_duration_seconds, api=Produce).",
        "s",
        [
            (
                "histogram_quantile(0.99, sum by (broker, le) (rate("
                f'kroute_upstream_request_duration_seconds_bucket{{{SEL}, api="Produce"}}[{RI}])))',
                "broker {{broker}}",
            )
        ],
    )
    d.timeseries(
        "Upstream latency p99 by API",
        "99th percentile of every upstream round trip by API (Fetch includes long polls).",
        "s",
        [
            (
                "histogram_quantile(0.99, sum by (api, le) (rate("
                f"kroute_upstream_request_duration_seconds_bucket{{{SEL}}}[{RI}])))",
                "{{api}}",
            )
        ],
    )
    d.timeseries(
        "Produce latency by broker",
        "Each broker's Produce round-trip estimate, a peak-sensitive EWMA (kroute_broker_latency_seconds); "
        "shown beside the cost, not routed on.",
        "s",
        [(f"max by (broker) (kroute_broker_latency_seconds{{{SEL}}})", "broker {{broker}}")],
    )
    d.timeseries(
        "Routing score: cost by broker",
        "Each broker's cost: the time a Produce request sent now would take, from kroute's bytes in "
        "flight at the rate the broker answers them (at least its time per request, or a stall's "
        "silence); neutral once stale (kroute_broker_cost_seconds). Lower cost, more batches.",
        "s",
        [(f"max by (broker) (kroute_broker_cost_seconds{{{SEL}}})", "broker {{broker}}")],
    )
    d.timeseries(
        "Produce byte share by broker",
        "Each broker's share of the Produce bytes kroute sent (kroute_upstream_produce_bytes_total).",
        "percentunit",
        [
            (
                f'{rate("kroute_upstream_produce_bytes_total", by=["broker"])}'
                f' / ignoring(broker) group_left {rate("kroute_upstream_produce_bytes_total")}',
                "broker {{broker}}",
            )
        ],
        stack=True,
    )
    d.timeseries(
        "Produce bytes by broker",
        "Produce request bytes per second sent to each broker.",
        "Bps",
        [(rate("kroute_upstream_produce_bytes_total", by=["broker"]), "broker {{broker}}")],
        stack=True,
    )

    d.row("Routing")
    d.timeseries(
        "Moved batches by route",
        "Keyless batches routing moved from the broker the client chose to another, per second "
        "(kroute_batches_moved_total).",
        "ops",
        [(rate("kroute_batches_moved_total", by=["from", "to"]), "{{from}} → {{to}}")],
        stack=True,
    )
    d.timeseries(
        "Kept batches by reason",
        "Produce batches left where the client put them, per second, by reason "
        "(kroute_batches_kept_total).",
        "ops",
        [(rate("kroute_batches_kept_total", by=["reason"]), "{{reason}}")],
        stack=True,
    )
    d.timeseries(
        "Moved records and bytes",
        "Records and bytes routing moved per second (kroute_records_moved_total, "
        "kroute_moved_bytes_total).",
        "short",
        [
            (rate("kroute_records_moved_total"), "records/s"),
            (rate("kroute_moved_bytes_total"), "bytes/s"),
        ],
    )
    d.timeseries(
        "Requests by API",
        "Client requests per second by API (kroute_requests_total).",
        "reqps",
        [(rate("kroute_requests_total", by=["api"]), "{{api}}")],
        stack=True,
    )

    d.row("Idempotent producers")
    d.timeseries(
        "Idempotent batch outcomes",
        "What happened to the batches of idempotent producers kroute renumbers, per second "
        "(kroute_idempotent_batches_total; docs/idempotent-routing.md).",
        "ops",
        [(rate("kroute_idempotent_batches_total", by=["outcome"]), "{{outcome}}")],
    )
    d.timeseries(
        "Idempotent producers tracked",
        "Producers whose numbering kroute owns, against the cap routing.max_producers.",
        "none",
        [
            (f"sum(kroute_idempotent_producers{{{SEL}}})", "tracked"),
            (f"sum(kroute_idempotent_producers_max{{{SEL}}})", "max"),
        ],
    )
    d.timeseries(
        "Idempotent producers recovered, adopted, refused, expired",
        "Per second: producers kroute did not see start, numbered again above the brokers' "
        "epochs (recovered, after a kroute restart) or reset once and passed through (adopted); "
        "producers turned away at the cap (refused); forgotten when idle (expired).",
        "ops",
        [
            (rate("kroute_idempotent_producers_recovered_total"), "recovered"),
            (rate("kroute_idempotent_producers_adopted_total"), "adopted"),
            (rate("kroute_idempotent_producers_refused_total"), "refused"),
            (rate("kroute_idempotent_producers_expired_total"), "expired"),
        ],
        w=24,
    )

    d.row("Consumer lag ([lag] enabled)")
    d.timeseries(
        "Consumer group status",
        "Burrow's verdict per group (kroute_lag_group_status): 1 OK, 2 WARN (falling behind), "
        "3 ERR (a partition stopped, stalled or rewound); docs/lag.md.",
        "none",
        [(f"max by (group) (kroute_lag_group_status{{{SEL}}})", "{{group}}")],
    )
    d.timeseries(
        "Consumer group lag",
        "Per group: messages not yet consumed (kroute_lag_group_messages, Burrow's totallag) "
        "and, on the right-hand scale, how old the oldest unread message is.",
        "short",
        [
            (f"max by (group) (kroute_lag_group_messages{{{SEL}}})", "{{group}} messages"),
            (
                f"max by (group) (kroute_lag_group_time_lag_seconds{{{SEL}}})",
                "{{group}} seconds",
            ),
        ],
    )

    d.row("Connections")
    d.timeseries(
        "Client connections",
        "Client connections open (kroute_client_connections_active) and accepted per second.",
        "short",
        [
            (f"sum by (instance) (kroute_client_connections_active{{{SEL}}})", "open {{instance}}"),
            (rate("kroute_client_connections_total", by=["instance"]), "accepted/s {{instance}}"),
        ],
    )
    d.timeseries(
        "Client limits",
        "Per second: connections refused at accept (limits.max_connections, "
        "max_connections_per_ip), reads paused at a buffered-bytes or in-flight limit, "
        "connections closed for a stalled partial request or idleness; and the bytes client "
        "connections hold, in MiB (kroute_client_buffered_bytes).",
        "short",
        [
            (rate("kroute_client_connections_refused_total", by=["reason"]), "refused/s {{reason}}"),
            (rate("kroute_client_read_pauses_total", by=["limit"]), "paused/s {{limit}}"),
            (rate("kroute_client_timeouts_total", by=["reason"]), "closed/s {{reason}}"),
            (f"sum(kroute_client_buffered_bytes{{{SEL}}}) / 1048576", "buffered MiB"),
        ],
    )
    d.timeseries(
        "Upstream connect failures and disconnects",
        "Per second, by broker: connections that could not be opened (TCP, TLS or SASL) and "
        "connections that ended with requests in flight.",
        "ops",
        [
            (rate("kroute_upstream_connect_failures_total", by=["broker"]), "connect failed {{broker}}"),
            (rate("kroute_upstream_disconnects_total", by=["broker"]), "disconnected {{broker}}"),
        ],
    )

    d.row("Errors")
    d.timeseries(
        "Client protocol errors",
        "Client connections closed for bad frames or an unsupported SASL exchange, per second, "
        "by reason (kroute_client_protocol_errors_total).",
        "ops",
        [(rate("kroute_client_protocol_errors_total", by=["reason"]), "{{reason}}")],
        w=8,
    )
    d.timeseries(
        "Upstream and cluster errors",
        "Per second: broker responses kroute could not parse or rewrite, clients closed without a "
        "broker, failed metadata refresh rounds.",
        "ops",
        [
            (rate("kroute_upstream_protocol_errors_total"), "unparsable responses"),
            (rate("kroute_rewrite_errors_total"), "rewrite errors"),
            (rate("kroute_upstream_unavailable_total"), "clients without broker"),
            (rate("kroute_metadata_refresh_failures_total"), "metadata refresh failures"),
        ],
        w=8,
    )
    d.timeseries(
        "Sequence errors",
        "OUT_OF_ORDER_SEQUENCE_NUMBER answers to renumbered batches per second: hidden (kroute's "
        "own, reported as REQUEST_TIMED_OUT) and passed (the broker's, passed to the client).",
        "ops",
        [
            (
                rate("kroute_idempotent_batches_total", 'outcome=~"sequence_error_.*"', by=["outcome"]),
                "{{outcome}}",
            )
        ],
        w=8,
    )
    d.timeseries(
        "TLS and SASL failures",
        "Per second: client TLS handshakes that failed; TLS handshakes with brokers that failed "
        "(by broker and reason); brokers refusing kroute's SASL credentials; clients refused "
        "SASL; certificate reloads that failed.",
        "ops",
        [
            (rate("kroute_tls_handshake_failures_total"), "client TLS handshakes"),
            (
                rate("kroute_upstream_tls_handshake_failures_total", by=["broker", "reason"]),
                "broker {{broker}} TLS: {{reason}}",
            ),
            (
                rate("kroute_sasl_authentication_failures_total", by=["mechanism"]),
                "SASL {{mechanism}} refused",
            ),
            (rate("kroute_client_sasl_refused_total"), "client SASL refused"),
            (
                rate("kroute_tls_reloads_total", 'result="error"', by=["what"]),
                "{{what}} reload failed",
            ),
        ],
        w=24,
    )

    return {
        "uid": "kroute",
        "title": "kroute",
        "description": "kroute, the Kafka wire-protocol proxy: per-broker latency and routing, "
        "idempotent producers, connections, errors. Generated by docker/grafana/dashboard.py.",
        "tags": ["kroute", "kafka"],
        "editable": True,
        "graphTooltip": 1,
        "refresh": "30s",
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": "now-1h", "to": "now"},
        "timepicker": {},
        "timezone": "",
        "fiscalYearStartMonth": 0,
        "liveNow": False,
        "weekStart": "",
        "links": [],
        "annotations": {"list": []},
        "templating": {
            "list": [
                {
                    "name": "instance",
                    "label": "kroute",
                    "type": "query",
                    "datasource": DATASOURCE,
                    "definition": "label_values(kroute_client_connections_total, instance)",
                    "query": {
                        "query": "label_values(kroute_client_connections_total, instance)",
                        "refId": "PrometheusVariableQueryEditor-VariableQuery",
                    },
                    "refresh": 2,
                    "includeAll": True,
                    "multi": True,
                    "allValue": ".*",
                    "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
                    "options": [],
                    "regex": "",
                    "sort": 1,
                    "hide": 0,
                }
            ]
        },
        "panels": d.panels,
    }


def render():
    return json.dumps(build(), indent=2, ensure_ascii=False) + "\n"


def main():
    text = render()
    if sys.argv[1:] == ["--check"]:
        if not OUT.exists() or OUT.read_text(encoding="utf-8") != text:
            print(f"{OUT} is not what {Path(__file__).name} generates: run it", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
