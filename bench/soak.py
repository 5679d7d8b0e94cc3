#!/usr/bin/env python3
"""Soak test of `twofold serve`: mixed good and bad clients for a bounded time, then checks.

Starts `twofold serve` on a model (tiny-main by default) and runs between --concurrency-min
and --concurrency-max clients at once (the number changes every 30 s) for --minutes. Each
client loops over requests drawn from this mix:

  valid      completions and chat, streamed and not; a chunked body; a body written slowly
             (10-byte pieces); a stream read slowly; GET /health, /metrics, /v1/models
  early hang-up  a stream closed after 1-3 events; a non-streamed request closed after 0-0.5 s
  malformed  broken JSON, wrong types, unknown and unimplemented fields, 26,000-deep
             nesting, bytes after a NUL, a form body, a gzip body, a chunked body over the
             limit, a Content-Length over the limit, garbage instead of HTTP

At the end it checks, and prints the figures for:
  - every valid request was answered in full (200 with every token, [DONE] for streams) or
    refused cleanly (429 or 503 with a JSON error); none lost (no status, reset, timeout);
  - every malformed request got its 4xx with a JSON error, none a 5xx or no status;
  - memory is flat: the server's resident memory (VmRSS, sampled every 10 s), averaged over
    the last tenth of the run, exceeds its average over the fifth tenth by at most 5% or
    16 MiB, whichever is larger. The first half is warm-up: the KV pool and the allocator's
    arenas are touched page by page over the first minutes (the pool alone is
    --kv-memory-mb). The slope over the second half (MiB per hour) is printed too;
  - no KV block is in use, nothing runs or waits (/metrics), after the load stops;
  - the server is alive throughout and exits 0 on SIGTERM.
Exit status 1 if any check fails.

  nice -n 19 python3 bench/soak.py --minutes 30
"""
import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_load  # noqa: E402
from serve_load import get_bytes, post_bytes  # noqa: E402

PROMPTS = ["The LORD is my shepherd;", "In the beginning", "Blessed are the meek", "SELECT * FROM",
           "And God said, Let there be light", "def main():"]
MAX_BODY = 256 * 1024  # the server's --max-body-bytes here

# kind -> (weight, class): "valid" must be answered in full or refused cleanly; "hangup"
# is abandoned on purpose; "bad" must get the listed statuses.
KINDS = {
    "stream": (20, "valid"), "whole": (14, "valid"), "chat_stream": (9, "valid"), "chat_whole": (7, "valid"),
    "chunked": (2, "valid"), "slow_writer": (3, "valid"), "slow_reader": (3, "valid"), "get": (4, "valid"),
    "hangup_stream": (8, "hangup"), "hangup_whole": (6, "hangup"),
    "bad_json": (4, "bad"), "wrong_type": (3, "bad"), "unknown_field": (2, "bad"), "unsupported": (2, "bad"),
    "deep": (2, "bad"), "nul": (1, "bad"), "form": (1, "bad"), "gzip": (1, "bad"), "chunked_over": (1, "bad"),
    "length_over": (1, "bad"), "garbage": (1, "bad"),
}
BAD_STATUS = {"bad_json": {400}, "wrong_type": {400}, "unknown_field": {400}, "unsupported": {400}, "deep": {400},
              "nul": {400}, "form": {415}, "gzip": {415}, "chunked_over": {413}, "length_over": {413},
              "garbage": {400}}
CLEAN_REFUSALS = {429, 503}


def completion_body(rng, stream, chat, n):
    body = {"max_tokens": n, "temperature": rng.choice([0, 0.8]), "seed": rng.randrange(1 << 30),
            "ignore_eos": True, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    if chat:
        body["messages"] = [{"role": "user", "content": rng.choice(PROMPTS)}]
    else:
        body["prompt"] = rng.choice(PROMPTS)
    return body


def path_of(chat):
    return "/v1/chat/completions" if chat else "/v1/completions"


def full_answer(r, n, stream):
    """True when r is a complete 200 answer with n tokens."""
    if r.status != 200:
        return False
    if stream:
        usage = r.events[-1].get("usage") if r.events else None
        return r.done and usage is not None and usage.get("completion_tokens") == n
    j = r.json()
    return j is not None and j.get("usage", {}).get("completion_tokens") == n


def clean_refusal(r):
    j = r.json() if not r.events else None
    return r.status in CLEAN_REFUSALS and isinstance(j, dict) and "error" in j


async def run_one(kind, rng, host, port):
    """Runs one request of `kind`; returns (outcome, detail) with outcome ok/refused/lost/wrong/hangup."""
    n = rng.randint(1, 48)
    chat = kind.startswith("chat")
    stream = kind in ("stream", "chat_stream", "slow_reader", "hangup_stream")
    body = completion_body(rng, stream, chat, n)
    data = post_bytes(path_of(chat), json.dumps(body))
    kw = {}
    if kind == "get":
        data = get_bytes(rng.choice(["/health", "/metrics", "/v1/models"]))
    elif kind == "chunked":
        raw = json.dumps(body).encode()
        cut = rng.randint(1, len(raw) - 1)
        data = (("POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                 % path_of(chat)).encode() + b"%x\r\n" % cut + raw[:cut] + b"\r\n" + b"%x\r\n" % (len(raw) - cut)
                + raw[cut:] + b"\r\n0\r\n\r\n")
    elif kind == "slow_writer":
        kw["write_delay"] = (10, 0.02)
    elif kind == "slow_reader":
        kw["read_delay"] = rng.uniform(0.05, 0.2)
    elif kind == "hangup_stream":
        stop_after = rng.randint(1, 3)
        kw["on_event"] = lambda r: len(r.events) < stop_after
    elif kind == "bad_json":
        data = post_bytes("/v1/completions", rng.choice(['{"prompt": "x", "max_tokens": ', '{"prompt" "x"}', "[1, 2",
                                                         "", "nul", '{"prompt": "\\ud800"']))
    elif kind == "wrong_type":
        data = post_bytes("/v1/completions", json.dumps(rng.choice([
            {"prompt": "x", "max_tokens": "ten"}, {"prompt": 42}, {"prompt": "x", "temperature": -1},
            {"prompt": "x", "stop": [1]}, {"prompt": [1, 99999999]}, {"messages": "hi"}])))
    elif kind == "unknown_field":
        data = post_bytes("/v1/completions", json.dumps({"prompt": "x", rng.choice(["guided_json", "foo", "best"]): 1}))
    elif kind == "unsupported":
        extra = rng.choice([{"response_format": {"type": "json_object"}}, {"tool_choice": "required"},
                            {"tools": [{"type": "function", "function": {"name": "f"}}]}, {"audio": {"voice": "x"}}])
        data = post_bytes("/v1/chat/completions", json.dumps(dict(completion_body(rng, False, True, 4), **extra)))
    elif kind == "deep":
        depth = 26000
        data = rng.choice([
            post_bytes("/v1/chat/completions",
                       '{"messages": [{"role": "user", "content": "x"}], "tools": %s%s}' % ("[" * depth, "]" * depth)),
            post_bytes("/v1/chat/completions", '{"messages": [{"role": "user", "content": "x"}], '
                                               '"chat_template_kwargs": {"a": %s%s}}' % ("[" * depth, "]" * depth)),
            post_bytes("/v1/completions", '{"prompt": ' + "[" * 52000)])
    elif kind == "nul":
        data = post_bytes("/v1/completions", json.dumps(body).encode() + b"\x00garbage")
    elif kind == "form":
        data = post_bytes("/v1/completions", "prompt=" + "a" * rng.choice([10, 9000]), "application/x-www-form-urlencoded")
    elif kind == "gzip":
        data = post_bytes("/v1/completions", "xx", extra_headers="Content-Encoding: gzip\r\n")
    elif kind == "chunked_over":
        chunk = b"4000\r\n" + b" " * 0x4000 + b"\r\n"
        data = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n" + chunk * (MAX_BODY // 0x4000 + 4))
    elif kind == "length_over":
        data = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: 268435456\r\n\r\n")
    elif kind == "garbage":
        data = rng.choice([b"GARBAGE\r\n\r\n", b"GET / HTTP/9.9\r\n\r\n", bytes(rng.randrange(256) for _ in range(64))
                           + b"\r\n\r\n"])

    if kind == "hangup_whole":
        return await hangup_whole(host, port, data, rng.uniform(0, 0.5))
    r = await serve_load.http_request(host, port, data, timeout=300, **kw)
    cls = KINDS[kind][1]
    if cls == "hangup":
        return ("hangup", None)
    if r.status == 0:
        return ("lost", "%s: no status (%s)" % (kind, r.error))
    if cls == "bad":
        ok = r.status in BAD_STATUS[kind] and isinstance(r.json(), dict) and "error" in r.json()
        return ("ok", None) if ok else ("wrong", "%s: status %d %r" % (kind, r.status, r.body[:200]))
    if kind == "get":
        return ("ok", None) if r.status == 200 else ("wrong", "get: status %d" % r.status)
    if full_answer(r, n, stream):
        return ("ok", None)
    if clean_refusal(r):
        return ("refused", None)
    return ("wrong", "%s: status %d done %s events %d body %r" % (kind, r.status, r.done, len(r.events), r.body[:200]))


async def hangup_whole(host, port, data, delay):
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 30)
        writer.write(data)
        await writer.drain()
        await asyncio.sleep(delay)
        writer.close()
        await writer.wait_closed()
    except (ConnectionError, OSError, asyncio.TimeoutError):
        pass
    return ("hangup", None)


async def soak(args, server):
    host, port = server.host, server.port
    rng = random.Random(args.seed)
    names = list(KINDS)
    weights = [KINDS[k][0] for k in names]
    counts = {k: {} for k in names}
    problems = []
    samples = []  # (t, rss MiB, threads, fds, kv used, connections)
    active = [args.concurrency_max]
    t0 = time.time()
    end = t0 + args.minutes * 60

    async def client(i):
        crng = random.Random(rng.random())
        while time.time() < end:
            if i >= active[0]:
                await asyncio.sleep(1)
                continue
            kind = crng.choices(names, weights)[0]
            outcome, detail = await run_one(kind, crng, host, port)
            counts[kind][outcome] = counts[kind].get(outcome, 0) + 1
            if detail and len(problems) < 50:
                problems.append(detail)

    async def monitor():
        last_change = 0
        while time.time() < end:
            now = time.time()
            if now - last_change >= 30:
                active[0] = rng.randint(args.concurrency_min, args.concurrency_max)
                last_change = now
            if not server.alive():
                problems.append("the server died")
                return
            m = await serve_load.metrics(host, port)
            samples.append((now - t0, server.rss_mib(), server.threads(), server.fds(),
                            m.get("twofold_kv_blocks_used"), m.get("twofold_http_connections_open")))
            if len(samples) % 6 == 1:
                done = sum(sum(c.values()) for c in counts.values())
                print("  %5.0f s: %d requests, %d clients, RSS %.1f MiB, KV blocks used %s, connections %s"
                      % (now - t0, done, active[0], samples[-1][1], samples[-1][4], samples[-1][5]), flush=True)
            await asyncio.sleep(10)

    await asyncio.gather(monitor(), *[client(i) for i in range(args.concurrency_max)])
    after = await serve_load.wait_idle(host, port, timeout=120)
    return counts, problems, samples, after, time.time() - t0


def window_mean(samples, lo, hi, total):
    vals = [s[1] for s in samples if lo * total <= s[0] <= hi * total]
    return statistics.mean(vals) if vals else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    serve_load.add_server_args(ap)
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--concurrency-min", type=int, default=128)
    ap.add_argument("--concurrency-max", type=int, default=256)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--server-args", default="--max-seqs 64 --max-waiting 256 --kv-memory-mb 96 -t 2 "
                    "--chat-template " + os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples",
                                                      "chatml.jinja"),
                    help="extra `twofold serve` arguments (--max-body-bytes is set to 256 KiB)")
    args = ap.parse_args()
    server = serve_load.Server(args.twofold, args.model,
                               ["--max-body-bytes", str(MAX_BODY)] + args.server_args.split())
    print("server: %s" % " ".join(server.cmd))
    print("".join(line for line in server.banner if "KV cache:" in line).strip())
    print("soak: %.0f minutes, %d-%d clients" % (args.minutes, args.concurrency_min, args.concurrency_max), flush=True)
    try:
        counts, problems, samples, after, elapsed = asyncio.run(soak(args, server))
    finally:
        alive = server.alive()
        rc = server.stop(timeout=300)

    total = sum(sum(c.values()) for c in counts.values())
    print("\n%d requests in %.1f min (%.1f per second)" % (total, elapsed / 60, total / elapsed))
    print("%-14s %8s %8s %8s %8s %8s" % ("kind", "ok", "refused", "hangup", "wrong", "lost"))
    sums = {}
    for k, c in counts.items():
        print("%-14s %8d %8d %8d %8d %8d" % (k, c.get("ok", 0), c.get("refused", 0), c.get("hangup", 0),
                                              c.get("wrong", 0), c.get("lost", 0)))
        for o, v in c.items():
            sums[o] = sums.get(o, 0) + v
    print("%-14s %8d %8d %8d %8d %8d" % ("all", sums.get("ok", 0), sums.get("refused", 0), sums.get("hangup", 0),
                                          sums.get("wrong", 0), sums.get("lost", 0)))
    for p in problems[:20]:
        print("  problem: %s" % p)
    span = samples[-1][0] if samples else 0
    early, late = window_mean(samples, 0.4, 0.5, span), window_mean(samples, 0.9, 1.0, span)
    half = [(t, rss) for t, rss, *_ in samples if t >= span / 2]
    slope = 0.0
    if len(half) >= 2:
        mt, mr = statistics.mean(t for t, _ in half), statistics.mean(r for _, r in half)
        var = sum((t - mt) ** 2 for t, _ in half)
        slope = sum((t - mt) * (r - mr) for t, r in half) / var * 3600 if var else 0.0
    print("RSS MiB by tenth of the run: " + ", ".join(
        "%.1f" % window_mean(samples, i / 10, (i + 1) / 10, span) for i in range(10)))
    print("RSS: fifth tenth %.1f MiB, last tenth %.1f MiB (%+.1f MiB); slope over the second half %+.1f MiB/hour; "
          "peak %.1f MiB; threads peak %d; open files peak %d" % (
              early, late, late - early, slope, max(s[1] for s in samples), max(s[2] for s in samples),
              max(s[3] for s in samples)))
    print("after the load: KV blocks used %s, running %s, waiting %s, connections open %s, requests abandoned %s" % (
        after.get("twofold_kv_blocks_used"), after.get("twofold_num_requests_running"),
        after.get("twofold_num_requests_waiting"), after.get("twofold_http_connections_open"),
        after.get("twofold_requests_abandoned_total")))
    print("server alive at the end: %s; exit status after SIGTERM: %d" % (alive, rc))
    checks = {
        "no valid request lost or answered wrong": sums.get("lost", 0) == 0 and sums.get("wrong", 0) == 0,
        "memory flat (last tenth <= fifth tenth + max(5%, 16 MiB))": late <= early + max(0.05 * early, 16),
        "all KV blocks free, nothing running or waiting": after.get("twofold_kv_blocks_used") == 0
        and after.get("twofold_num_requests_running") == 0 and after.get("twofold_num_requests_waiting") == 0,
        "server alive, exit 0": alive and rc == 0,
    }
    for name, ok in checks.items():
        print("%s: %s" % ("PASS" if ok else "FAIL", name))
    sys.exit(0 if all(checks.values()) else 1)


if __name__ == "__main__":
    main()
