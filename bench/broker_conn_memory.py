#!/usr/bin/env python3
"""Heap and kernel memory a Kafka broker spends on idle client connections (issue 26, part 5).

    bench/broker_conn_memory.py PID PORT N

Opens N connections to the broker listening on 127.0.0.1:PORT (JVM pid PID, from
`scripts/cluster.sh status`), each sending one ApiVersions v0 request and reading its answer,
and prints the broker's heap used after a full GC (`jcmd GC.run`, then `GC.heap_info`), its RSS
and the kernel's TCP memory (/proc/net/sockstat) before and after. Raise `ulimit -n` first
for N over about 1,000.
"""

import re
import socket
import struct
import subprocess
import sys
import time

pid, port, n = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
def heap_used():
    subprocess.run(["jcmd", str(pid), "GC.run"], capture_output=True)
    time.sleep(1)
    out = subprocess.run(["jcmd", str(pid), "GC.heap_info"], capture_output=True, text=True).stdout
    return sum(int(x) for x in re.findall(r"generation\s+total \d+K, used (\d+)K", out))
def rss():
    for l in open(f"/proc/{pid}/status"):
        if l.startswith("VmRSS"):
            return int(l.split()[1])
def sockmem():
    for l in open("/proc/net/sockstat"):
        if l.startswith("TCP:"):
            return int(l.split()[-1]) * 4  # pages -> KiB
# ApiVersions v0 request: size, api_key 18, version 0, correlation id, client id
def api_versions(cid):
    client = b"mem"
    body = struct.pack(">hhih", 18, 0, cid, len(client)) + client
    return struct.pack(">i", len(body)) + body
base = [heap_used() for _ in range(2)][-1], rss(), sockmem()
socks = []
for i in range(n):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(api_versions(i))
    size = struct.unpack(">i", s.recv(4))[0]
    got = 0
    while got < size:
        got += len(s.recv(size - got))
    socks.append(s)
time.sleep(2)
after = [heap_used() for _ in range(2)][-1], rss(), sockmem()
print(f"{n} idle connections to :{port} (pid {pid}): heap used after GC {base[0]} -> {after[0]} KiB "
      f"({(after[0]-base[0])/n:.1f} KiB each), RSS {base[1]} -> {after[1]} KiB ({(after[1]-base[1])/n:.1f} KiB each), "
      f"kernel TCP memory {base[2]} -> {after[2]} KiB")
for s in socks:
    s.close()
