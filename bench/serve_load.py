"""Pieces shared by the serving load scripts (serve_streams.py, soak.py).

- `Server`: starts `twofold serve --port 0`, reads the port from its banner, and reads its
  resident memory, thread and file-descriptor counts from /proc.
- `http_request`: one HTTP/1.1 exchange over a raw asyncio socket, so that a script can send
  malformed bytes, chunked bodies, or hang up at any point, and read a Server-Sent Events
  stream (chunked transfer encoding decoded here) event by event.
- `metrics`: the unlabelled samples of GET /metrics.

Only the standard library: the scripts run wherever python3 does.
"""
import asyncio
import json
import os
import re
import signal
import subprocess
import time


def add_server_args(ap):
    """--twofold and --model, defaulting to this checkout's build and demo model."""
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    ap.add_argument("--twofold", default=os.path.join(root, "build", "tools", "twofold"))
    ap.add_argument("--model", default=os.path.join(root, "models", "tiny-main"))


class Server:
    """`twofold serve` on a free loopback port, started by this process."""

    def __init__(self, twofold, model, args=(), env=None, nice=0):
        cmd = [twofold, "serve", "-m", model, "--host", "127.0.0.1", "--port", "0", *args]
        if nice:
            cmd = ["nice", "-n", str(nice), *cmd]
        self.cmd = cmd
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
        self.banner = []
        self.host, self.port = None, None
        for line in self.proc.stdout:
            self.banner.append(line.rstrip())
            m = re.search(r"listening on http://([^:]+):(\d+)", line)
            if m:
                self.host, self.port = m.group(1), int(m.group(2))
            if "KV cache:" in line:
                break
        if self.port is None:
            raise RuntimeError("twofold serve exited before listening (status %s)" % self.proc.wait())

    @property
    def pid(self):
        return self.proc.pid

    def _status(self, key):
        with open("/proc/%d/status" % self.pid) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
        return -1

    def rss_mib(self):
        return self._status("VmRSS") / 1024.0

    def threads(self):
        return self._status("Threads")

    def fds(self):
        return len(os.listdir("/proc/%d/fd" % self.pid))

    def alive(self):
        return self.proc.poll() is None

    def stop(self, timeout=120):
        """SIGTERM, then the exit status (the server drains in-flight requests first)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


class Reply:
    def __init__(self):
        self.status = 0          # 0: no status line came back
        self.headers = {}
        self.body = b""          # the whole body when not an event stream
        self.events = []         # the JSON payloads of "data: ..." events
        self.done = False        # "data: [DONE]" seen
        self.comments = 0        # SSE comment lines (keep-alive ticks)
        self.error = None        # why the exchange failed (exception text), None if it did not
        self.hung_up = False     # this side closed on purpose before the end

    def json(self):
        try:
            return json.loads(self.body)
        except ValueError:
            return None


def _feed_sse(reply, buf, on_event):
    """Consumes whole events from `buf` (bytes); returns the unconsumed tail."""
    while b"\n\n" in buf:
        ev, buf = buf.split(b"\n\n", 1)
        for line in ev.split(b"\n"):
            if line.startswith(b":"):
                reply.comments += 1
            elif line.startswith(b"data: "):
                payload = line[6:]
                if payload == b"[DONE]":
                    reply.done = True
                else:
                    reply.events.append(json.loads(payload))
                    if on_event and on_event(reply) is False:
                        raise _HangUp()
    return buf


class _HangUp(Exception):
    pass


def post_bytes(path, body, content_type="application/json", extra_headers=""):
    """The bytes of a POST with a Content-Length body (body: bytes or str)."""
    if isinstance(body, str):
        body = body.encode()
    head = "POST %s HTTP/1.1\r\nHost: localhost\r\nContent-Type: %s\r\nContent-Length: %d\r\n%s\r\n" % (
        path, content_type, len(body), extra_headers)
    return head.encode() + body


def get_bytes(path, extra_headers=""):
    return ("GET %s HTTP/1.1\r\nHost: localhost\r\n%s\r\n" % (path, extra_headers)).encode()


async def http_request(host, port, data, *, on_event=None, timeout=600, write_delay=None, read_delay=None):
    """Sends `data` (bytes) and reads one response.

    on_event(reply) is called after each SSE event; returning False hangs up.
    write_delay: (chunk_bytes, seconds) sends the request that slowly (a slow writer).
    read_delay: seconds to sleep between reads of the response (a slow reader).
    Returns a Reply; reply.error says what went wrong (connection refused, reset, timeout).
    """
    reply = Reply()
    writer = None
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
        if write_delay:
            step, pause = write_delay
            for i in range(0, len(data), step):
                writer.write(data[i:i + step])
                await writer.drain()
                await asyncio.sleep(pause)
        else:
            writer.write(data)
            await writer.drain()
        await asyncio.wait_for(_read_response(reader, reply, on_event, read_delay), timeout)
    except _HangUp:
        reply.hung_up = True
    except (asyncio.TimeoutError, asyncio.IncompleteReadError, ConnectionError, OSError, ValueError) as e:
        reply.error = "%s: %s" % (type(e).__name__, e)
    finally:
        if writer is not None:
            writer.close()
            try:
                await writer.wait_closed()
            except (ConnectionError, OSError):
                pass
    return reply


async def _read_response(reader, reply, on_event, read_delay):
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    reply.status = int(lines[0].split()[1])
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            reply.headers[k.strip().lower()] = v.strip()
    sse = reply.headers.get("content-type", "").startswith("text/event-stream")
    buf = b""
    if reply.headers.get("transfer-encoding", "").lower() == "chunked":
        while True:
            size_line = await reader.readuntil(b"\r\n")
            n = int(size_line.split(b";")[0], 16)
            if n == 0:
                await reader.readuntil(b"\r\n")  # no trailers are sent
                break
            chunk = await reader.readexactly(n)
            await reader.readexactly(2)
            if read_delay:
                await asyncio.sleep(read_delay)
            if sse:
                buf = _feed_sse(reply, buf + chunk, on_event)
                if reply.done:
                    break
            else:
                reply.body += chunk
    elif "content-length" in reply.headers:
        reply.body = await reader.readexactly(int(reply.headers["content-length"]))
    else:
        reply.body = await reader.read()


async def get(host, port, path, headers=""):
    return await http_request(host, port, get_bytes(path, headers), timeout=30)


async def metrics(host, port):
    """{name: value} of the unlabelled samples of /metrics ({} if it did not answer)."""
    r = await get(host, port, "/metrics")
    out = {}
    for line in r.body.decode(errors="replace").splitlines():
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*) (\S+)$", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


async def wait_idle(host, port, timeout=60):
    """Polls /metrics until nothing runs, waits or holds a KV block; returns the last sample."""
    t0 = time.time()
    m = {}
    while time.time() - t0 < timeout:
        m = await metrics(host, port)
        if (m.get("twofold_num_requests_running") == 0 and m.get("twofold_num_requests_waiting") == 0
                and m.get("twofold_kv_blocks_used") == 0):
            break
        await asyncio.sleep(0.2)
    return m
