#!/usr/bin/env python3
"""slow_downloads.py - memory a server holds per downloading connection.

Opens N connections to HOST:PORT, each with a small receive buffer, sends GET PATH on every one,
waits until every response's status line has arrived, then keeps reading slowly (READ bytes per
connection every 0.5 s) for HOLD seconds while it samples the resident memory (VmRSS) of the
server's processes. Prints one line:

    conns N ok K before_kib B during_kib D per_conn_kib P

where B is the processes' RSS before the first connection, D the median of the samples taken
while all N are open, and P = (D - B) / N. Exits 1 when a connection failed or was answered
with anything but 200 or 206 (a broken server), never for a large figure.

Usage: slow_downloads.py HOST PORT PATH N HOLD_SECONDS PID [PID...]
"""
import selectors
import socket
import statistics
import sys
import time

READ = 1024


def rss_kib(pids):
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
    return total


def main():
    if len(sys.argv) < 7:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    host, port, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    n, hold = int(sys.argv[4]), float(sys.argv[5])
    pids = [int(p) for p in sys.argv[6:]]
    before = rss_kib(pids)
    request = f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
    socks = []
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        # A small window: the server's send stops after a few KiB and the response stays open.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect((host, port))
        s.sendall(request)
        s.setblocking(False)
        socks.append(s)
    sel = selectors.DefaultSelector()
    heads = {}
    for s in socks:
        sel.register(s, selectors.EVENT_READ)
    deadline = time.monotonic() + 60
    while len(heads) < n and time.monotonic() < deadline:
        for key, _ in sel.select(timeout=1):
            s = key.fileobj
            try:
                data = s.recv(READ)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            heads[s] = data[:12] if data else b"closed"
            sel.unregister(s)
    ok = sum(1 for h in heads.values() if h in (b"HTTP/1.1 200", b"HTTP/1.1 206"))
    samples = []
    end = time.monotonic() + hold
    while time.monotonic() < end:
        samples.append(rss_kib(pids))
        for s in socks:
            try:
                s.recv(READ)
            except (BlockingIOError, OSError):
                pass
        time.sleep(0.5)
    during = statistics.median(samples) if samples else before
    for s in socks:
        s.close()
    print(f"conns {n} ok {ok} before_kib {before} during_kib {during:.0f} "
          f"per_conn_kib {(during - before) / n:.1f}")
    return 0 if ok == n else 1


if __name__ == "__main__":
    sys.exit(main())
