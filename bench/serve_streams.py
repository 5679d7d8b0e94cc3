#!/usr/bin/env python3
"""How many concurrent Server-Sent Events streams `twofold serve` holds, and at what memory.

Starts `twofold serve` on a model (the demo model by default), opens --streams connections
at once (one burst of connects, or spread over --ramp seconds), each POSTing a streamed completion of --max-tokens tokens
with ignore_eos, and reads every stream to its end. Prints:
  - how many streams got status 200, how many got each other status, how many failed with
    no status (connection refused or reset: what a burst must never cause);
  - the most streams open at once that had already received a token (all of them are being
    generated at the same time when --max-seqs covers them);
  - how many ended with every token and "data: [DONE]";
  - the server's resident memory (VmRSS) and thread count idle and at the peak, and the
    extra memory per open stream; and at the sample with the most streams receiving tokens,
    the memory less the KV blocks then in use (from /metrics: the KV cache is the engine's,
    not the HTTP layer's);
  - KV blocks in use afterwards (/metrics; must be 0).
Exit status 1 if any stream failed or fell short.

  python3 bench/serve_streams.py --twofold build/tools/twofold --streams 2000
"""
import argparse
import asyncio
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_load  # noqa: E402

PROMPT = "The LORD is my shepherd;"


async def run(args, server):
    host, port = server.host, server.port
    body = ('{"prompt": "%s", "max_tokens": %d, "temperature": 0, "ignore_eos": true, "stream": true, '
            '"stream_options": {"include_usage": true}}' % (PROMPT, args.max_tokens))
    request = serve_load.post_bytes("/v1/completions", body)
    streaming = 0          # open streams that have received at least one token
    peak = {"streaming": 0, "rss": 0.0, "threads": 0, "fds": 0, "t_all": None,
            "at_most_streaming": (0, 0.0, 0.0)}
    t0 = time.time()

    def on_event(reply):
        nonlocal streaming
        if len(reply.events) == 1:
            streaming += 1
            if streaming > peak["streaming"]:
                peak["streaming"] = streaming
                if streaming == args.streams:
                    peak["t_all"] = time.time() - t0
        return True

    async def one(i):
        nonlocal streaming
        if args.ramp:
            await asyncio.sleep(args.ramp * i / args.streams)
        r = await serve_load.http_request(host, port, request, on_event=on_event, timeout=args.timeout)
        if r.events:
            streaming -= 1
        return r

    async def sample():
        while True:
            rss = server.rss_mib()
            m = await serve_load.metrics(host, port)
            kv = (m.get("twofold_kv_blocks_used") or 0) * args.kv_block_mib
            peak["rss"] = max(peak["rss"], rss)
            if streaming >= peak["at_most_streaming"][0]:  # the sample with the most open streams
                peak["at_most_streaming"] = (streaming, rss, kv)
            peak["threads"] = max(peak["threads"], server.threads())
            peak["fds"] = max(peak["fds"], server.fds())
            await asyncio.sleep(0.5)

    sampler = asyncio.ensure_future(sample())
    replies = await asyncio.gather(*[one(i) for i in range(args.streams)])
    sampler.cancel()
    elapsed = time.time() - t0
    after = await serve_load.wait_idle(host, port)
    return replies, peak, elapsed, after


async def hold_idle(args, server):
    """Opens --streams connections that each send half a request head and hold it: what an
    open connection costs the server with no request running (no KV, no engine work)."""
    conns = []
    for _ in range(args.streams):
        try:
            _, w = await asyncio.open_connection(server.host, server.port)
            w.write(b"GET /health HTTP/1.1\r\nHost: x\r\n")
            conns.append(w)
        except OSError as e:
            print("connect failed: %s" % e)
            break
    await asyncio.sleep(3)  # under the read timeouts (5 s in cpp-httplib, 30 s here)
    m = await serve_load.metrics(server.host, server.port)
    figures = (len(conns), server.rss_mib(), server.threads(), server.fds(), m.get("twofold_http_connections_open"))
    for w in conns:
        w.close()
    return figures


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    serve_load.add_server_args(ap)
    ap.add_argument("--streams", type=int, default=2000)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--timeout", type=float, default=900, help="seconds one stream may take")
    ap.add_argument("--idle", action="store_true",
                    help="instead of streams, hold --streams connections with half a request head each")
    ap.add_argument("--ramp", type=float, default=0,
                    help="spread the connects evenly over this many seconds (default 0: one burst)")
    ap.add_argument("--server-args", default=None,
                    help="extra `twofold serve` arguments (default: --max-seqs and --max-waiting covering "
                         "--streams, --max-batch-tokens = --streams, -t 2)")
    args = ap.parse_args()
    n = args.streams
    extra = (args.server_args.split() if args.server_args is not None else
             ["--max-seqs", str(n), "--max-waiting", str(n), "--max-batch-tokens", str(max(512, n)), "-t", "2"])
    server = serve_load.Server(args.twofold, args.model, extra)
    # "KV cache: 4096 blocks x 16 tokens = 65536 tokens (f32, 384.0 MiB); ..."
    kv_line = next(line for line in server.banner if "KV cache:" in line)
    m = re.search(r"KV cache: (\d+) blocks .*, ([0-9.]+) MiB\)", kv_line)
    args.kv_block_mib = float(m.group(2)) / int(m.group(1))
    try:
        time.sleep(1)
        idle = {"rss": server.rss_mib(), "threads": server.threads(), "fds": server.fds()}
        if args.idle:
            n_open, rss, threads, fds, counted = asyncio.run(hold_idle(args, server))
            print("server: %s" % " ".join(server.cmd))
            print("%d connections held open (server counts %s): memory %.1f MiB -> %.1f MiB (+%.1f KiB per "
                  "connection); threads %d -> %d; open files %d -> %d" % (
                      n_open, counted, idle["rss"], rss, (rss - idle["rss"]) * 1024 / max(n_open, 1),
                      idle["threads"], threads, idle["fds"], fds))
            return
        replies, peak, elapsed, after = asyncio.run(run(args, server))
    finally:
        rc = server.stop()

    statuses = {}
    for r in replies:
        statuses[r.status] = statuses.get(r.status, 0) + 1
    no_status = [r for r in replies if r.status == 0]
    full = sum(1 for r in replies if r.status == 200 and r.done and r.events
               and (r.events[-1].get("usage") or {}).get("completion_tokens") == args.max_tokens)
    print("server: %s" % " ".join(server.cmd))
    print("streams requested %d (connects %s), max_tokens %d, %.1f s in all" % (
        n, "spread over %.0f s" % args.ramp if args.ramp else "in one burst", args.max_tokens, elapsed))
    print("statuses: %s; no status (refused/reset/timeout): %d" % (
        ", ".join("%d x %d" % (v, k) for k, v in sorted(statuses.items()) if k), len(no_status)))
    for r in no_status[:5]:
        print("  e.g. %s" % r.error)
    print("most streams receiving tokens at once: %d%s" % (
        peak["streaming"], " (all %d by %.1f s)" % (n, peak["t_all"]) if peak["t_all"] else ""))
    print("complete (every token and [DONE]): %d of %d" % (full, n))
    print("server memory: idle %.1f MiB, peak %.1f MiB (+%.1f MiB, %.1f KiB per stream)" % (
        idle["rss"], peak["rss"], peak["rss"] - idle["rss"], (peak["rss"] - idle["rss"]) * 1024 / max(n, 1)))
    k, rss, kv = peak["at_most_streaming"]
    print("  sampled with %d streams receiving tokens: %.1f MiB, of which %.1f MiB KV blocks in use; "
          "without them +%.1f MiB over idle, %.1f KiB per stream" % (
              k, rss, kv, rss - kv - idle["rss"], (rss - kv - idle["rss"]) * 1024 / max(k, 1)))
    print("server threads: idle %d, peak %d; open files: idle %d, peak %d" % (
        idle["threads"], peak["threads"], idle["fds"], peak["fds"]))
    print("afterwards: KV blocks used %s, running %s, waiting %s; exit status %d after SIGTERM" % (
        after.get("twofold_kv_blocks_used"), after.get("twofold_num_requests_running"),
        after.get("twofold_num_requests_waiting"), rc))
    ok = full == n and after.get("twofold_kv_blocks_used") == 0 and rc == 0
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
