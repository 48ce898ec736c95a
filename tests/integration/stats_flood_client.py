#!/usr/bin/env python3
"""stats_flood_client.py - floods a psdbd with resolves that miss, each naming something new, the
way an anonymous client can: used by stats_flood_test.sh (scaled) and tests/bench/stats_flood.sh
(the full 20,000 x 4,000-byte flood). Keep-alive connections on several threads; prints one JSON
line: {"sent", "statuses": {code: count}, "seconds"}.

Usage: stats_flood_client.py URL COUNT [--name-bytes N] [--vary app|family|abi] [--threads T]
                                [--prefix P] [--app NAME]
  --vary app     each resolve names a new application of N bytes (default)
  --vary family  each resolve names a new family of N bytes
  --vary abi     one application (--app, default FloodGame), each resolve a new ABI range (a new
                 miss shape)
"""
import argparse
import http.client
import json
import sys
import threading
import time
import urllib.parse


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("count", type=int)
    ap.add_argument("--name-bytes", type=int, default=4000)
    ap.add_argument("--vary", choices=("app", "family", "abi"), default="app")
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--prefix", default="flood")
    ap.add_argument("--app", default="FloodGame")
    a = ap.parse_args()
    u = urllib.parse.urlsplit(a.url)
    statuses = {}
    lock = threading.Lock()

    def name(i):
        head = "%s%08d" % (a.prefix, i)
        return (head + "x" * a.name_bytes)[: max(a.name_bytes, len(head))]

    def query(i):
        app, family, lo = a.app, "flood-gfx", 1
        if a.vary == "app":
            app = name(i)
        elif a.vary == "family":
            family = name(i)
        else:
            lo = 1000 + i
        return "/v1/resolve?" + urllib.parse.urlencode(
            {"app": app, "app_version": "1.0.0.0", "family": family, "abi_min": lo,
             "abi_max": lo})

    def worker(first, step):
        seen = {}
        conn = None
        for i in range(first, a.count, step):
            for attempt in range(3):
                try:
                    if conn is None:
                        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
                    conn.request("GET", query(i))
                    resp = conn.getresponse()
                    resp.read()
                    seen[resp.status] = seen.get(resp.status, 0) + 1
                    if resp.getheader("Connection", "").lower() == "close":
                        conn.close()
                        conn = None
                    break
                except (OSError, http.client.HTTPException):
                    if conn is not None:
                        conn.close()
                    conn = None
                    if attempt == 2:
                        seen["error"] = seen.get("error", 0) + 1
        if conn is not None:
            conn.close()
        with lock:
            for k, v in seen.items():
                statuses[str(k)] = statuses.get(str(k), 0) + v

    start = time.monotonic()
    threads = [threading.Thread(target=worker, args=(t, a.threads)) for t in range(a.threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps({"sent": a.count, "statuses": statuses,
                      "seconds": round(time.monotonic() - start, 3)}))
    return 0 if statuses.get("error", 0) == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
