"""Captured Kafka traffic -> fuzz seeds (docs/hardening.md, "Fuzzing" / "Seeds").

Reads a pcap of loopback traffic (scripts/capture-seeds.sh), reassembles each TCP connection to
a broker port (the bootstrap's), splits both directions into Kafka frames, pairs each response
with its request by connection and correlation id, keeps only connections whose requests carry a
capture client's client.id ("capture-<client>..."), and writes the frames in each fuzz target's
input format (as fuzz/examples/seeds.rs does: selector byte(s), then the decoder's bytes) to
fuzz/corpus/<target>/capture-<client>-<api>-v<version>[-variant][-n].

    convert.py --pcap P --bootstrap H:P,... --corpus fuzz/corpus [--summary FILE]

Old capture-* files are removed first. Duplicates (same bytes) are written once; each target
keeps at most CAP files, chosen round-robin over the clients and preferring shapes not yet
taken (a new API version, codec, ...); every file is under MAX_SEED bytes.
"""

import argparse
import collections
import hashlib
import os
import struct
import sys

import dpkt

CAP = 40
PER_SHAPE = 4  # files of one shape (API version, codec, ...) at most
MAX_SEED = 64 * 1024
CLIENTS = ["kafka-python", "librdkafka", "franz-go", "java"]

API_NAMES = {
    0: "produce", 1: "fetch", 2: "list-offsets", 3: "metadata", 8: "offset-commit",
    9: "offset-fetch", 10: "find-coordinator", 11: "join-group", 12: "heartbeat",
    13: "leave-group", 14: "sync-group", 15: "describe-groups", 16: "list-groups",
    17: "sasl-handshake", 18: "api-versions", 19: "create-topics", 20: "delete-topics",
    22: "init-producer-id", 23: "offset-for-leader-epoch", 24: "add-partitions-to-txn",
    25: "add-offsets-to-txn", 26: "end-txn", 28: "txn-offset-commit", 29: "describe-acls",
    32: "describe-configs", 36: "sasl-authenticate", 37: "create-partitions",
    42: "delete-groups", 55: "describe-quorum", 60: "describe-cluster", 61: "describe-producers",
    65: "describe-transactions", 66: "list-transactions", 68: "consumer-group-heartbeat",
    69: "consumer-group-describe", 71: "get-telemetry-subscriptions", 72: "push-telemetry",
    75: "describe-topic-partitions", 76: "share-group-heartbeat", 78: "share-fetch",
    79: "share-acknowledge",
}

# First flexible version of the APIs whose bodies are read here (Kafka's message definitions,
# as vendor/kafka-protocol has them): request header v2 / response header v1 from there on.
# ApiVersions responses always have header v0.
FLEXIBLE_FROM = {0: 9, 1: 12, 3: 9, 8: 8, 10: 3, 11: 6, 14: 4, 18: 3, 55: 0, 60: 0, 68: 0,
                 78: 0, 79: 0}

CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}

# Requests whose wait the deadline reader looks at (src/upstream/deadline.rs): first in line.
WAITING = {1, 11, 14, 19, 20, 37, 21, 43, 45, 46, 57, 78, 80}


class Reader:
    def __init__(self, b, pos=0):
        self.b, self.pos = b, pos

    def take(self, n):
        if n < 0 or self.pos + n > len(self.b):
            raise ValueError("short")
        out = self.b[self.pos:self.pos + n]
        self.pos += n
        return out

    def i8(self):
        return struct.unpack(">b", self.take(1))[0]

    def i16(self):
        return struct.unpack(">h", self.take(2))[0]

    def i32(self):
        return struct.unpack(">i", self.take(4))[0]

    def i64(self):
        return struct.unpack(">q", self.take(8))[0]

    def uvarint(self):
        shift = out = 0
        while True:
            byte = self.take(1)[0]
            out |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return out
            shift += 7
            if shift > 63:
                raise ValueError("varint")

    def varint(self):
        v = self.uvarint()
        return (v >> 1) ^ -(v & 1)

    def string(self, flexible):
        n = self.uvarint() - 1 if flexible else self.i16()
        return None if n < 0 else self.take(n).decode("utf-8", "replace")

    def bytes_(self, flexible):
        n = self.uvarint() - 1 if flexible else self.i32()
        return None if n < 0 else self.take(n)

    def array_len(self, flexible):
        return self.uvarint() - 1 if flexible else self.i32()

    def tagged(self):
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())


# ------------------------------------------------------------------------- TCP reassembly

def read_pcap(path, ports):
    """{(client addr, client port, server port): [to-server segments, to-client segments]}
    with the initial sequence number of each direction (from the SYNs)."""
    flows = collections.defaultdict(lambda: {"isn": [None, None], "segs": [[], []]})
    with open(path, "rb") as f:
        try:
            reader = dpkt.pcap.Reader(f)
        except ValueError:
            f.seek(0)
            reader = dpkt.pcapng.Reader(f)
        link = reader.datalink()
        for _, raw in reader:
            ip = link_ip(link, raw)
            if ip is None or not isinstance(ip.data, dpkt.tcp.TCP):
                continue
            tcp = ip.data
            if tcp.dport in ports:
                key, d = (bytes(ip.src), tcp.sport, tcp.dport), 0
            elif tcp.sport in ports:
                key, d = (bytes(ip.dst), tcp.dport, tcp.sport), 1
            else:
                continue
            flow = flows[key]
            if tcp.flags & dpkt.tcp.TH_SYN:
                # A new connection on a reused port: start over.
                if d == 0 and flow["isn"][0] is not None and flow["isn"][0] != tcp.seq:
                    flows[key + (len(flows),)] = flows.pop(key)
                    flow = flows[key]
                flow["isn"][d] = tcp.seq
            if tcp.data:
                flow["segs"][d].append((tcp.seq, bytes(tcp.data)))
    return flows


def link_ip(link, raw):
    if link == dpkt.pcap.DLT_EN10MB:
        eth = dpkt.ethernet.Ethernet(raw)
        return eth.data if isinstance(eth.data, (dpkt.ip.IP, dpkt.ip6.IP6)) else None
    if link == dpkt.pcap.DLT_LINUX_SLL:
        sll = dpkt.sll.SLL(raw)
        return sll.data if isinstance(sll.data, (dpkt.ip.IP, dpkt.ip6.IP6)) else None
    if link == dpkt.pcap.DLT_NULL or link == dpkt.pcap.DLT_LOOP:
        return dpkt.loopback.Loopback(raw).data
    if link == dpkt.pcap.DLT_RAW or link == 101:
        return dpkt.ip.IP(raw) if raw[0] >> 4 == 4 else dpkt.ip6.IP6(raw)
    return None


def stream(isn, segs):
    """The bytes of one direction from its start, up to the first gap."""
    if isn is None:
        return b""
    out = bytearray()
    nxt = (isn + 1) & 0xFFFFFFFF
    for seq, data in sorted(segs, key=lambda s: (s[0] - nxt) & 0xFFFFFFFF):
        off = (nxt - seq) & 0xFFFFFFFF
        if off >= 0x80000000:  # a gap: seq is ahead of what we have
            break
        if off < len(data):
            out += data[off:]
            nxt = (nxt + len(data) - off) & 0xFFFFFFFF
    return bytes(out)


def frames(data):
    out, pos = [], 0
    while pos + 4 <= len(data):
        (size,) = struct.unpack(">i", data[pos:pos + 4])
        if size < 0 or pos + 4 + size > len(data):
            break
        out.append(data[pos + 4:pos + 4 + size])
        pos += 4 + size
    return out


# ------------------------------------------------------------------------------- messages

class Exchange:
    def __init__(self, request):
        self.request = request
        self.api, self.version, self.corr = struct.unpack(">hhi", request[:8])
        r = Reader(request, 8)
        self.client_id = r.string(False)
        if self.api in FLEXIBLE_FROM and self.version >= FLEXIBLE_FROM[self.api]:
            r.tagged()
        self.body_at = r.pos
        self.response = None

    @property
    def flexible(self):
        return self.api in FLEXIBLE_FROM and self.version >= FLEXIBLE_FROM[self.api]

    @property
    def body(self):
        return self.request[self.body_at:]

    def response_body(self):
        r = Reader(self.response, 4)
        if self.flexible and self.api != 18:
            r.tagged()
        return self.response[r.pos:]

    @property
    def name(self):
        return API_NAMES.get(self.api, f"api{self.api}")


def client_of(client_id):
    if not client_id or not client_id.startswith("capture-"):
        return None
    rest = client_id[len("capture-"):]
    for c in CLIENTS:
        if rest == c or rest.startswith(c + "-"):
            return c
    return None


def connections(flows, kroute_ports=frozenset()):
    """[(client, [Exchange], (request bytes, response bytes))] for the capture clients'
    connections."""
    out = []
    for key, flow in flows.items():
        via_kroute = key[2] in kroute_ports
        raw = (stream(flow["isn"][0], flow["segs"][0]), stream(flow["isn"][1], flow["segs"][1]))
        requests, responses = frames(raw[0]), frames(raw[1])
        exchanges = []
        for req in requests:
            try:
                exchanges.append(Exchange(req))
            except ValueError:
                pass
        clients = {client_of(e.client_id) for e in exchanges}
        clients.discard(None)
        if len(clients) != 1:
            continue
        # Clients run through kroute ("-via-kroute" in their client.id): only their own
        # requests to kroute are theirs; kroute's answers and its upstream connections are not.
        marked = any("-via-kroute" in (e.client_id or "") for e in exchanges)
        if marked != via_kroute:
            continue
        if via_kroute:
            raw = (raw[0], b"")
            responses = []
        by_corr = {}
        for e in exchanges:
            by_corr.setdefault(e.corr, e)
        for resp in responses:
            if len(resp) < 4:
                continue
            e = by_corr.pop(struct.unpack(">i", resp[:4])[0], None)
            if e is not None:
                e.response = resp
        out.append((clients.pop(), exchanges, raw))
    return out


def produce_entries(e):
    """[(topic, partition, records)] of a Produce request body."""
    r = Reader(e.body)
    flexible = e.flexible
    r.string(flexible)  # transactional id
    r.i16()  # acks
    r.i32()  # timeout
    out = []
    for _ in range(r.array_len(flexible)):
        topic = r.take(16).hex() if e.version >= 13 else r.string(flexible)
        for _ in range(r.array_len(flexible)):
            index = r.i32()
            records = r.bytes_(flexible)
            if flexible:
                r.tagged()
            if records:
                out.append((topic, index, records))
        if flexible:
            r.tagged()
    return out


def sync_group_assignments(e):
    """Consumer-protocol assignments in a SyncGroup request (the leader's) and its answer."""
    flexible, v = e.flexible, e.version
    out = []
    r = Reader(e.body)
    r.string(flexible)  # group
    r.i32()  # generation
    r.string(flexible)  # member
    if v >= 3:
        r.string(flexible)  # group instance id
    protocol_type = "consumer"
    if v >= 5:
        protocol_type = r.string(flexible)
        r.string(flexible)  # protocol name
    for _ in range(max(r.array_len(flexible), 0)):
        r.string(flexible)
        a = r.bytes_(flexible)
        if flexible:
            r.tagged()
        if a:
            out.append(("request", a))
    if e.response is not None:
        r = Reader(e.response_body())
        if v >= 1:
            r.i32()  # throttle
        r.i16()  # error
        if v >= 5:
            r.string(flexible)
            r.string(flexible)
        a = r.bytes_(flexible)
        if a:
            out.append(("response", a))
    return out if protocol_type in (None, "consumer") else []


def batch_shape(records):
    """(codec, idempotent, transactional, keyed, batches) of a partition entry's batches."""
    shapes, pos, keyed = [], 0, False
    while pos + 61 <= len(records):
        length = struct.unpack(">i", records[pos + 8:pos + 12])[0]
        attrs = struct.unpack(">h", records[pos + 21:pos + 23])[0]
        pid = struct.unpack(">q", records[pos + 43:pos + 51])[0]
        codec = attrs & 7
        shapes.append((CODECS.get(codec, f"codec{codec}"), pid >= 0, bool(attrs & 0x10)))
        try:
            keyed = keyed or first_record_keyed(codec, records[pos + 61:pos + 12 + length])
        except Exception:  # noqa: BLE001 - a name detail only
            pass
        pos += 12 + length
    if not shapes:
        return ("none", False, False, False, 0)
    codec, idem, txn = shapes[0]
    return (codec, idem, txn, keyed, len(shapes))


def first_record_keyed(codec, data):
    from kafka import codec as kc
    decode = {0: lambda d: d, 1: kc.gzip_decode, 2: kc.snappy_decode, 3: kc.lz4_decode,
              4: kc.zstd_decode}[codec]
    r = Reader(decode(data))
    r.varint()  # length
    r.i8()  # attributes
    r.varint()  # timestamp delta
    r.varint()  # offset delta
    return r.varint() >= 0


def software(e):
    """ApiVersions v3+: the client's software name and version."""
    if e.api != 18 or e.version < 3:
        return None
    r = Reader(e.body)
    return f"{r.string(True)} {r.string(True)}"


# -------------------------------------------------------------------------------- targets

# The versions each target's selector byte picks from (fuzz/src/lib.rs `pick`: start +
# selector % span); lag_offset_commit picks with selector >> 1.
RANGES = {"produce_body": (3, 12), "rewrite_metadata": (0, 13),
          "rewrite_find_coordinator": (0, 6), "rewrite_describe_cluster": (0, 2),
          "rewrite_describe_quorum": (0, 2), "rewrite_produce": (10, 12),
          "rewrite_fetch": (16, 18), "api_versions_clamp": (0, 4), "lag_offset_commit": (2, 10)}


def pick(selector, lo, hi):
    return lo + selector % (hi - lo + 1)


class Target:
    def __init__(self, name):
        self.name = name
        self.candidates = []  # (client, shape, file name, bytes)

    def add(self, client, shape, fname, data, version=None):
        if self.name in RANGES:
            # The selector byte must pick the version the bytes were captured in.
            selector = data[0] >> 1 if self.name == "lag_offset_commit" else data[0]
            assert pick(selector, *RANGES[self.name]) == version, (self.name, fname, version)
        if len(data) <= MAX_SEED:
            self.candidates.append((client, shape, fname, bytes(data)))

    def choose(self, cap=CAP):
        """Distinct bytes; first one candidate of each new shape, round-robin over clients,
        then the rest likewise, up to cap."""
        seen_bytes, names, chosen = set(), collections.Counter(), []
        seen_shapes = collections.Counter()
        per_client = collections.OrderedDict((c, []) for c in CLIENTS)
        for cand in self.candidates:
            per_client[cand[0]].append(cand)
        for want_new in (True, False):
            queues = {c: list(q) for c, q in per_client.items()}
            while len(chosen) < cap and any(queues.values()):
                for c in CLIENTS:
                    q = queues[c]
                    while q:
                        client, shape, fname, data = q.pop(0)
                        digest = hashlib.sha256(data).digest()
                        if digest in seen_bytes or seen_shapes[shape] >= (1 if want_new else PER_SHAPE):
                            continue
                        seen_bytes.add(digest)
                        seen_shapes[shape] += 1
                        names[fname] += 1
                        chosen.append((fname, names[fname], data))
                        break
                    if len(chosen) >= cap:
                        break
        # Numbered only where a name repeats.
        totals = collections.Counter(f for f, _, _ in chosen)
        return [(f if totals[f] == 1 else f"{f}-{n}", data) for f, n, data in chosen]


def build(conns):
    t = {n: Target(n) for n in [
        "request_header", "request_deadline", "produce_body", "batch_inspect",
        "batch_renumber_join", "rewrite_metadata", "rewrite_find_coordinator",
        "rewrite_describe_cluster", "rewrite_describe_quorum", "rewrite_produce", "rewrite_fetch", "api_versions_clamp",
        "lag_offset_commit", "lag_assignment", "frame_codec"]}
    seen = collections.defaultdict(lambda: collections.defaultdict(set))  # client -> api -> versions
    codecs = collections.defaultdict(set)
    softwares = collections.defaultdict(set)
    skipped = collections.Counter()
    budget = bytes([0, 0x3F])  # 64 KiB inspection budget
    renumber = bytes([0, 2, 0, 0, 0, 100])  # epoch 2, first sequence 100

    for client, exchanges, raw in conns:
        for e in exchanges:
            base = f"capture-{client}-{e.name}-v{e.version}"
            seen[client][e.name].add(e.version)
            sw = software(e) if e.api == 18 else None
            if sw:
                softwares[client].add(sw)
            t["request_header"].add(client, (e.api, e.version), base, e.request)
            deadline_shape = (e.api in WAITING, e.api, e.version)
            t["request_deadline"].add(client, deadline_shape, base, e.request)
            if e.response is not None and e.api in (3, 18):
                t["request_header"].add(client, ("response", e.api, e.version),
                                        base + "-response", e.response)
            try:
                convert_exchange(t, client, e, base, budget, renumber, codecs, skipped)
            except ValueError as err:
                skipped[f"{e.name} v{e.version}: unreadable ({err})"] += 1

        # The byte streams as they arrived: whole frames up to ~4 KiB from the start. Named
        # after what the connection was for (its first request past the handshake).
        main = next((e for e in exchanges if e.api not in (18, 3)), exchanges[0] if exchanges else None)
        if main is None:
            continue
        name = f"capture-{client}-{main.name}-v{main.version}"
        for direction, data in zip(("requests", "responses"), raw):
            cut = frame_prefix(data, 4096)
            if not cut:
                continue
            shape = (direction, main.api)
            # max 1 MiB, 7-byte chunks; cut inside a frame, 64-byte chunks; max 256 B (an
            # oversize frame), 32-byte chunks.
            t["frame_codec"].add(client, shape + ("whole",), f"{name}-{direction}",
                                 bytes([20, 6]) + cut)
            t["frame_codec"].add(client, shape + ("cut",), f"{name}-{direction}-truncated",
                                 bytes([20, 63]) + data[:len(cut) + 7])
            t["frame_codec"].add(client, shape + ("max256",), f"{name}-{direction}-max256",
                                 bytes([8, 31]) + cut)
    return t, seen, codecs, softwares, skipped


def frame_prefix(data, limit):
    pos = 0
    while pos + 4 <= len(data):
        end = pos + 4 + struct.unpack(">i", data[pos:pos + 4])[0]
        if end > limit and pos > 0:
            break
        pos = end
    return data[:pos]


def convert_exchange(t, client, e, base, budget, renumber, codecs, skipped):
    v = e.version
    if e.api == 0:
        entries = produce_entries(e)
        if 3 <= v <= 12:
            first = batch_shape(entries[0][2])[:4] if entries else None
            t["produce_body"].add(client, (client, v, first, len(entries)), base,
                                  bytes([v - 3]) + e.body, v)
        else:
            skipped[f"produce request v{v} (produce_body reads v3-v12)"] += 1
        for _topic, _part, records in entries:
            codec, idem, txn, keyed, n = batch_shape(records)
            codecs[client].add(codec)
            variant = f"{codec}{'-idempotent' if idem else ''}{'-txn' if txn else ''}" \
                      f"{'-keyed' if keyed else ''}{f'-{n}batches' if n > 1 else ''}"
            # Per client: each client's encoder writes its own batches.
            shape = (client, codec, idem, txn, keyed, n > 1)
            t["batch_inspect"].add(client, shape, f"{base}-{variant}", budget + records)
            t["batch_renumber_join"].add(client, (idem,) + shape, f"{base}-{variant}",
                                         renumber + records)
        if e.response is not None:
            if 10 <= v <= 12:
                t["rewrite_produce"].add(client, v, base, bytes([v - 10]) + e.response_body(), v)
            else:
                skipped[f"produce response v{v} (rewrite_produce reads v10-v12)"] += 1
    elif e.response is None:
        return
    elif e.api == 1:
        if 16 <= v <= 18:
            t["rewrite_fetch"].add(client, (v, len(e.response) > 200), base,
                                   bytes([v - 16]) + e.response_body(), v)
        else:
            skipped[f"fetch response v{v} (rewrite_fetch reads v16-v18)"] += 1
    elif e.api == 3:
        t["rewrite_metadata"].add(client, (v, len(e.response) > 200), base,
                                  bytes([v]) + e.response_body(), v)
    elif e.api == 10:
        t["rewrite_find_coordinator"].add(client, (v, e.response_body()[4:12]), base,
                                          bytes([v]) + e.response_body(), v)
    elif e.api == 55:
        t["rewrite_describe_quorum"].add(client, v, base, bytes([v]) + e.response_body(), v)
    elif e.api == 60:
        t["rewrite_describe_cluster"].add(client, v, base, bytes([v]) + e.response_body(), v)
    elif e.api == 18:
        body = e.response_body()
        # A version the broker does not know is answered in v0 (UNSUPPORTED_VERSION).
        answered = 0 if body[:2] == b"\x00\x23" else v
        t["api_versions_clamp"].add(client, (answered, body[:2]),
                                    base + ("-unsupported" if answered != v else ""),
                                    bytes([answered]) + body, answered)
    elif e.api == 8:
        if 2 <= v <= 10:
            t["lag_offset_commit"].add(client, ("request", v), base,
                                       bytes([(v - 2) * 2]) + e.request, v)
            t["lag_offset_commit"].add(client, ("response", v), base + "-response",
                                       bytes([(v - 2) * 2 + 1]) + e.response, v)
    elif e.api == 14:
        for side, assignment in sync_group_assignments(e):
            t["lag_assignment"].add(client, (side, assignment[:2]), f"{base}-{side}",
                                    assignment)


def txn_of(e):
    r = Reader(e.body)
    return r.string(e.flexible) is not None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pcap", required=True)
    ap.add_argument("--bootstrap", required=True, help="H:P,... (the broker ports)")
    ap.add_argument("--kroute", default="", help="H:P,... kroute's ports (requests only)")
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--summary")
    ap.add_argument("--cap", type=int, default=CAP)
    args = ap.parse_args()
    ports = {int(a.rsplit(":", 1)[1]) for a in args.bootstrap.split(",")}
    kroute_ports = {int(a.rsplit(":", 1)[1]) for a in args.kroute.split(",") if a}

    flows = read_pcap(args.pcap, ports | kroute_ports)
    conns = connections(flows, kroute_ports)
    targets, seen, codecs, softwares, skipped = build(conns)

    lines = [f"capture: {os.path.basename(args.pcap)}: {len(flows)} connections to ports "
             f"{sorted(ports)} (brokers) and {sorted(kroute_ports)} (kroute, requests only), "
             f"{len(conns)} of capture clients"]
    for client in CLIENTS:
        n = sum(1 for c, _, _ in conns if c == client)
        if not n:
            lines.append(f"{client}: no connection")
            continue
        apis = ", ".join(f"{api} v{'/'.join(map(str, sorted(vs)))}"
                         for api, vs in sorted(seen[client].items()))
        lines.append(f"{client} ({n} connections; {'; '.join(sorted(softwares[client])) or '-'}): "
                     f"codecs {', '.join(sorted(codecs[client])) or '-'}; {apis}")
    for what, n in sorted(skipped.items()):
        lines.append(f"skipped: {what} x{n}")
    for name, target in targets.items():
        d = os.path.join(args.corpus, name)
        os.makedirs(d, exist_ok=True)
        for f in os.listdir(d):
            if f.startswith("capture-"):
                os.remove(os.path.join(d, f))
        chosen = target.choose(args.cap)
        for fname, data in chosen:
            with open(os.path.join(d, fname), "wb") as f:
                f.write(data)
        sizes = [len(d) for _, d in chosen]
        lines.append(f"{name}: {len(chosen)} files (of {len(target.candidates)} candidates)"
                     + (f", {min(sizes)}-{max(sizes)} bytes" if sizes else ""))
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if args.summary:
        with open(args.summary, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
