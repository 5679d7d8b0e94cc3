#!/usr/bin/env python3
"""`twofold serve` driven by the official `openai` Python client, over loopback.

Starts `twofold serve --port 0` on the bundled tiny model and checks:
  - completions and chat, streamed and not, have the OpenAI shapes the client parses;
  - greedy output equals `twofold generate --temp 0` for the same prompt;
  - errors surface as the client's typed exceptions (400, 404 model_not_found, 401);
  - a load test: 200 concurrent streaming requests (raw HTTP), some hanging up early and a
    few malformed; every well-formed one that stayed connected gets exactly max_tokens
    tokens and [DONE], the server stays up, and afterwards /metrics shows no KV block used;
  - SIGTERM then exits 0.
Fails (never skips) when `openai` is not installed: CI installs it (scripts/install-deps.sh).
"""
import argparse
import http.client
import json
import random
import re
import signal
import subprocess
import sys
import threading
import time

try:
    import openai
except ImportError:
    print("FAIL: the `openai` package is not installed (python3 -m pip install openai)", file=sys.stderr)
    sys.exit(1)

PROMPT = "The LORD is my shepherd;"
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


def start_server(twofold, model, *extra):
    p = subprocess.Popen([twofold, "serve", "-m", model, "--port", "0", *extra],
                         stdout=subprocess.PIPE, text=True)
    for line in p.stdout:
        m = re.search(r"listening on http://([^:]+):(\d+)", line)
        if m:
            return p, m.group(1), int(m.group(2))
    raise RuntimeError("twofold serve exited before listening (status %s)" % p.wait())


def stop_server(p):
    p.send_signal(signal.SIGTERM)
    rc = p.wait(timeout=120)
    check(rc == 0, "SIGTERM: exit status %d, expected 0" % rc)


def generate_cli(twofold, model, prompt, n, *extra):
    out = subprocess.run([twofold, "generate", "-m", model, "-p", prompt, "-n", str(n), "--temp", "0", "--json", *extra],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def test_completions(client, twofold, model):
    want = generate_cli(twofold, model, PROMPT, 16)
    r = client.completions.create(model="tiny-main", prompt=PROMPT, max_tokens=16, temperature=0)
    check(r.object == "text_completion", "completions object %r" % r.object)
    check(r.choices[0].text == want["text"], "greedy completion %r != generate %r" % (r.choices[0].text, want["text"]))
    check(r.usage.completion_tokens == len(want["output_ids"]), "completion_tokens %d" % r.usage.completion_tokens)
    check(r.usage.prompt_tokens == len(want["prompt_ids"]), "prompt_tokens %d" % r.usage.prompt_tokens)
    check(r.choices[0].finish_reason in ("length", "stop"), "finish_reason %r" % r.choices[0].finish_reason)

    chunks = list(client.completions.create(model="tiny-main", prompt=PROMPT, max_tokens=16, temperature=0,
                                            stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    check(text == want["text"], "streamed completion %r != generate %r" % (text, want["text"]))
    check(chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == len(want["output_ids"]),
          "streamed usage %r" % (chunks[-1].usage,))

    # echo with max_tokens 0 and logprobs, as evaluation harnesses score a text: the prompt's
    # tokens with their logprobs, the first None (it has no context), nothing generated.
    e = client.completions.create(model="tiny-main", prompt=PROMPT, max_tokens=0, echo=True, logprobs=1, temperature=0)
    lp = e.choices[0].logprobs
    check(e.choices[0].text == PROMPT and e.usage.completion_tokens == 0, "echo %r" % (e.choices[0],))
    check(len(lp.tokens) == len(want["prompt_ids"]) and lp.token_logprobs[0] is None
          and all(x <= 0 for x in lp.token_logprobs[1:]), "echo logprobs %r" % (lp,))

    # OpenAI's penalties: the same through the server as through `generate`'s flags, and not a no-op.
    penalised = generate_cli(twofold, model, PROMPT, 24, "--frequency-penalty", "1.5", "--presence-penalty", "0.5",
                             "--ignore-eos")
    plain = generate_cli(twofold, model, PROMPT, 24, "--ignore-eos")
    r = client.completions.create(model="tiny-main", prompt=PROMPT, max_tokens=24, temperature=0,
                                  frequency_penalty=1.5, presence_penalty=0.5, extra_body={"ignore_eos": True})
    check(r.choices[0].text == penalised["text"],
          "penalised completion %r != generate %r" % (r.choices[0].text, penalised["text"]))
    check(penalised["output_ids"] != plain["output_ids"], "the penalties changed nothing: %r" % plain["text"])
    # logit_bias: the plain first token banned, the first token is another.
    first = generate_cli(twofold, model, PROMPT, 1, "--ignore-eos")
    r = client.completions.create(model="tiny-main", prompt=PROMPT, max_tokens=1, temperature=0,
                                  logit_bias={str(first["output_ids"][0]): -100}, extra_body={"ignore_eos": True})
    check(r.choices[0].text != first["text"],
          "logit_bias -100 on the greedy token %d: still %r" % (first["output_ids"][0], r.choices[0].text))

    r = client.completions.create(model="tiny-main", prompt=PROMPT, max_tokens=3, temperature=0, logprobs=2,
                                  extra_body={"ignore_eos": True})
    lp = r.choices[0].logprobs
    check(lp is not None and len(lp.tokens) == 3 and len(lp.token_logprobs) == 3 and len(lp.top_logprobs) == 3,
          "completion logprobs %r" % (lp,))


def test_chat(client):
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hello"}]
    r = client.chat.completions.create(model="tiny-main", messages=messages, max_tokens=12, temperature=0,
                                       logprobs=True, top_logprobs=2)
    check(r.object == "chat.completion", "chat object %r" % r.object)
    msg = r.choices[0].message
    check(msg.role == "assistant" and isinstance(msg.content, str), "chat message %r" % (msg,))
    check(r.usage.completion_tokens >= 1 and r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens,
          "chat usage %r" % (r.usage,))
    content = r.choices[0].logprobs.content
    check(len(content) == r.usage.completion_tokens and all(len(t.top_logprobs) == 2 for t in content),
          "chat logprobs %r" % (content,))

    stream = client.chat.completions.create(model="tiny-main", messages=messages, max_tokens=12, temperature=0,
                                            stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    check(chunks[0].choices[0].delta.role == "assistant", "first chunk carries the role")
    text = "".join((c.choices[0].delta.content or "") for c in chunks if c.choices)
    check(text == msg.content, "streamed chat %r != chat %r" % (text, msg.content))
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    check(finishes == [r.choices[0].finish_reason], "streamed finish reasons %r" % finishes)
    check(chunks[-1].usage.completion_tokens == r.usage.completion_tokens, "streamed chat usage")
    # The details objects as the client types them: the streamed request repeated the prompt,
    # so its full blocks came from the prefix cache; tiny-main writes no <think> block.
    details = chunks[-1].usage.prompt_tokens_details
    check(details is not None and details.cached_tokens > 0 and details.cached_tokens < r.usage.prompt_tokens,
          "streamed chat cached_tokens %r" % (details,))
    check(r.usage.completion_tokens_details is not None and r.usage.completion_tokens_details.reasoning_tokens == 0,
          "chat reasoning_tokens %r" % (r.usage.completion_tokens_details,))

    several = client.chat.completions.create(model="tiny-main", messages=messages, max_tokens=4, temperature=0.9,
                                             seed=3, n=3)
    check([c.index for c in several.choices] == [0, 1, 2] and several.usage.completion_tokens <= 12,
          "n=3: %r" % (several,))
    streamed = {}
    for c in client.chat.completions.create(model="tiny-main", messages=messages, max_tokens=4, temperature=0.9,
                                            seed=3, n=3, stream=True):
        for ch in c.choices:
            streamed[ch.index] = streamed.get(ch.index, "") + (ch.delta.content or "")
    check(streamed == {c.index: c.message.content for c in several.choices},
          "n=3 streamed %r against %r" % (streamed, [c.message.content for c in several.choices]))


def test_json_mode(client):
    """response_format json_object: each choice is a JSON object (json.loads reads it) or, cut at max_tokens,
    the start of one; json_schema: objects of the schema's shape; a schema outside the subset is a 400."""
    messages = [{"role": "user", "content": "Describe a king as a JSON object."}]
    r = client.chat.completions.create(model="tiny-main", messages=messages, max_tokens=120, temperature=1.0, seed=4,
                                       n=4, response_format={"type": "json_object"})
    for ch in r.choices:
        text = ch.message.content
        check(text.startswith("{"), "json_object content %r" % text)
        if ch.finish_reason == "stop":
            check(isinstance(json.loads(text), dict), "json_object content %r" % text)
        else:
            check(ch.finish_reason == "length", "finish_reason %r" % ch.finish_reason)
    schema = {"type": "object", "properties": {"name": {"enum": ["Ada", "Bob"]}, "age": {"type": "integer"},
                                               "ok": {"type": "boolean"}},
              "required": ["name", "age", "ok"], "additionalProperties": False}
    r = client.chat.completions.create(model="tiny-main", messages=messages, max_tokens=80, temperature=1.0, seed=2,
                                       n=3, response_format={"type": "json_schema",
                                                             "json_schema": {"name": "person", "strict": True,
                                                                             "schema": schema}})
    for ch in r.choices:
        v = json.loads(ch.message.content)
        check(ch.finish_reason == "stop" and list(v) == ["name", "age", "ok"] and v["name"] in ("Ada", "Bob") and
              isinstance(v["age"], int) and isinstance(v["ok"], bool), "json_schema content %r" % ch.message.content)
    try:
        client.chat.completions.create(model="tiny-main", messages=messages, max_tokens=4,
                                       response_format={"type": "json_schema",
                                                        "json_schema": {"name": "k", "schema": {
                                                            "type": "object",
                                                            "properties": {"d": {"type": "string", "format": "uri"}}}}})
        check(False, "a schema with 'format' accepted")
    except openai.BadRequestError as e:
        check(e.body.get("param") == "response_format.json_schema.schema" and "'format'" in e.body.get("message", ""),
              "json_schema error %r" % (e.body,))


def test_errors(client):
    try:
        client.completions.create(model="tiny-main", prompt=PROMPT, max_tokens=5000)
        check(False, "max_tokens beyond the context accepted")
    except openai.BadRequestError as e:
        check(e.status_code == 400 and e.body.get("param") == "max_tokens", "max_tokens error %r" % (e.body,))
    try:
        client.completions.create(model="tiny-main", prompt=PROMPT, max_tokens=2, logit_bias={"99999999": 1})
        check(False, "logit_bias outside the vocabulary accepted")
    except openai.BadRequestError as e:
        check(e.status_code == 400 and e.body.get("param") == "logit_bias", "logit_bias error %r" % (e.body,))
    try:
        client.completions.create(model="no-such-model", prompt=PROMPT, max_tokens=2)
        check(False, "unknown model accepted")
    except openai.NotFoundError as e:
        check(e.body.get("code") == "model_not_found" and e.body.get("param") == "model", "model error %r" % (e.body,))
    try:
        client.chat.completions.create(model="tiny-main", messages=[], max_tokens=2)
        check(False, "empty messages accepted")
    except openai.BadRequestError as e:
        check(e.body.get("param") == "messages", "messages error %r" % (e.body,))
    models = client.models.list()
    check([m.id for m in models.data] == ["tiny-main"], "models %r" % (models,))


def test_no_chat_template(twofold, model):
    """Without --chat-template, tiny-main (which has no template of its own) refuses chats with 400."""
    p, host, port = start_server(twofold, model, "--served-model-name", "tiny-main")
    try:
        client = openai.OpenAI(base_url="http://%s:%d/v1" % (host, port), api_key="unused", max_retries=0)
        try:
            client.chat.completions.create(model="tiny-main", messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
            check(False, "chat without a chat template accepted")
        except openai.BadRequestError as e:
            check(e.status_code == 400 and "no chat template" in e.body.get("message", ""),
                  "no-template error %r" % (e.body,))
        r = client.completions.create(model="tiny-main", prompt=PROMPT, max_tokens=2)
        check(len(r.choices) == 1, "completions refused without a chat template")
    finally:
        stop_server(p)


def test_tools(twofold, model, qwen3_config):
    """Tools through the client's own request types, with Qwen3's template (which lists them)."""
    import tempfile
    with tempfile.NamedTemporaryFile("w", suffix=".jinja") as f:
        f.write(json.load(open(qwen3_config))["chat_template"])
        f.flush()
        p, host, port = start_server(twofold, model, "--served-model-name", "tiny-main", "--chat-template", f.name,
                                     "--tool-call-parser", "hermes")
    try:
        client = openai.OpenAI(base_url="http://%s:%d/v1" % (host, port), api_key="unused", max_retries=0)
        tools = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                                   "parameters": {"type": "object",
                                                                  "properties": {"city": {"type": "string"}},
                                                                  "required": ["city"]}}}]
        messages = [{"role": "user", "content": "Weather in Oslo?"},
                    {"role": "assistant", "content": None,
                     "tool_calls": [{"id": "call_1", "type": "function",
                                     "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
                    {"role": "tool", "tool_call_id": "call_1", "content": "3 C"}]
        r = client.chat.completions.create(model="tiny-main", messages=messages, tools=tools, max_tokens=6,
                                           temperature=0)
        plain = client.chat.completions.create(model="tiny-main", messages=messages, max_tokens=6, temperature=0)
        check(r.usage.prompt_tokens > plain.usage.prompt_tokens,
              "tools not in the prompt: %d vs %d tokens" % (r.usage.prompt_tokens, plain.usage.prompt_tokens))
        msg = r.choices[0].message
        check(isinstance(msg.content, str) and msg.tool_calls is None and r.choices[0].finish_reason == "length",
              "tools: plain output %r" % (msg,))
        # tool_choice "required" and a named function: one call, held to the tool's parameters (a city from an
        # enum, so that tiny-main's call ends within max_tokens).
        enum_tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
            "type": "object", "properties": {"city": {"enum": ["Oslo", "Rome"]}}, "required": ["city"]}}},
            {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object",
                                                                                "properties": {}}}}]
        for choice in ["required", {"type": "function", "function": {"name": "get_time"}}]:
            # parallel_tool_calls False: one call (with True, "required" may write several, and tiny-main goes
            # on writing them past max_tokens)
            r = client.chat.completions.create(model="tiny-main", messages=messages[:1], tools=enum_tools,
                                               tool_choice=choice, max_tokens=60, temperature=1.0, seed=1,
                                               parallel_tool_calls=False)
            calls = r.choices[0].message.tool_calls
            check(r.choices[0].finish_reason == "tool_calls" and calls is not None and len(calls) == 1,
                  "tool_choice %r: %r" % (choice, r.choices[0]))
            if calls:
                args = json.loads(calls[0].function.arguments)
                if isinstance(choice, dict):
                    check(calls[0].function.name == "get_time" and args == {}, "named call %r" % (calls[0],))
                else:
                    check((calls[0].function.name, args) in [("get_weather", {"city": "Oslo"}),
                                                             ("get_weather", {"city": "Rome"}), ("get_time", {})],
                          "required call %r" % (calls[0],))
        try:
            client.chat.completions.create(model="tiny-main", messages=messages, max_tokens=2,
                                           tools=[{"type": "function", "function": {"name": "bad name"}}])
            check(False, "a function name with a space accepted")
        except openai.BadRequestError as e:
            check(e.body.get("param") == "tools[0].function.name", "tool name error %r" % (e.body,))
    finally:
        stop_server(p)


def test_reasoning(twofold, model, chat_template):
    """reasoning_content through the client: a template that opens a <think> block (as DeepSeek-R1's does)
    makes tiny-main's whole output reasoning, whole and streamed."""
    import tempfile
    source = open(chat_template).read()
    opened = source.replace("'<|im_start|>assistant\\n'", "'<|im_start|>assistant\\n<think>\\n'")
    check(opened != source, "the ChatML example's generation prompt was not found")
    with tempfile.NamedTemporaryFile("w", suffix=".jinja") as f:
        f.write(opened)
        f.flush()
        p, host, port = start_server(twofold, model, "--served-model-name", "tiny-main", "--chat-template", f.name,
                                     "--reasoning-parser", "think")
    try:
        client = openai.OpenAI(base_url="http://%s:%d/v1" % (host, port), api_key="unused", max_retries=0)
        messages = [{"role": "user", "content": "Why is the sky blue?"}]
        r = client.chat.completions.create(model="tiny-main", messages=messages, max_tokens=8, temperature=0)
        msg = r.choices[0].message
        reasoning = (msg.model_extra or {}).get("reasoning_content")
        check(isinstance(reasoning, str) and reasoning and msg.content == "", "reasoning: whole %r" % (msg,))
        streamed, content = "", ""
        for chunk in client.chat.completions.create(model="tiny-main", messages=messages, max_tokens=8,
                                                    temperature=0, stream=True):
            if chunk.choices:
                delta = chunk.choices[0].delta
                streamed += (delta.model_extra or {}).get("reasoning_content") or ""
                content += delta.content or ""
        check(streamed == reasoning and content == "",
              "reasoning: streamed %r / %r against %r" % (streamed, content, reasoning))
    finally:
        stop_server(p)


def test_api_key(twofold, model):
    p, host, port = start_server(twofold, model, "--api-key", "sekret")
    try:
        base = "http://%s:%d/v1" % (host, port)
        try:
            openai.OpenAI(base_url=base, api_key="wrong", max_retries=0).completions.create(
                model="tiny-main", prompt=PROMPT, max_tokens=2)
            check(False, "wrong API key accepted")
        except openai.AuthenticationError as e:
            check(e.status_code == 401, "401 expected")
        r = openai.OpenAI(base_url=base, api_key="sekret").completions.create(model="tiny-main", prompt=PROMPT,
                                                                              max_tokens=2)
        check(len(r.choices) == 1, "right API key refused")
    finally:
        stop_server(p)


def sse_request(host, port, body, hang_up_after=None):
    """POSTs a streaming completion; returns (status, events, done, hung_up)."""
    conn = http.client.HTTPConnection(host, port, timeout=300)
    try:
        payload = body if isinstance(body, str) else json.dumps(body)
        conn.request("POST", "/v1/completions", payload, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            return resp.status, [json.loads(resp.read() or b"null")], False, False
        events, done = [], False
        while True:
            line = resp.readline()
            if not line:
                break
            line = line.decode().strip()
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                done = True
                break
            events.append(json.loads(line[6:]))
            if hang_up_after is not None and len(events) >= hang_up_after:
                resp.close()
                conn.close()
                return 200, events, False, True
        return 200, events, done, False
    finally:
        conn.close()


def metric(host, port, name):
    conn = http.client.HTTPConnection(host, port, timeout=30)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    m = re.search(r"^%s (\S+)$" % re.escape(name), text, re.M)
    return float(m.group(1)) if m else None


def test_load(host, port, n=200):
    rng = random.Random(1234)
    prompts = [PROMPT, "In the beginning", "Blessed are the meek", "And God said, Let there be light"]
    jobs = []
    for i in range(n):
        kind = rng.random()
        if i % 40 == 7:
            jobs.append(("malformed", '{"prompt": "x", "max_tokens": ', None))
        elif i % 40 == 23:
            jobs.append(("malformed", json.dumps({"prompt": PROMPT, "max_tokens": "ten", "stream": True}), None))
        else:
            body = {"model": "tiny-main", "prompt": rng.choice(prompts), "max_tokens": rng.randint(4, 20),
                    "temperature": rng.choice([0, 0.8]), "seed": i, "ignore_eos": True, "stream": True,
                    "stream_options": {"include_usage": True}}
            jobs.append(("disconnect" if kind < 0.3 else "complete", body, rng.randint(1, 3) if kind < 0.3 else None))
    results = [None] * n

    def run(i):
        kind, body, hang = jobs[i]
        try:
            results[i] = sse_request(host, port, body, hang)
        except Exception as e:  # a dropped or refused connection is a failure of the server
            results[i] = ("exception", repr(e))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    t0 = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.time() - t0
    n_done = 0
    for i, (kind, body, hang) in enumerate(jobs):
        r = results[i]
        if r[0] == "exception":
            check(False, "load request %d (%s): %s" % (i, kind, r[1]))
            continue
        status, events, done, hung_up = r
        if kind == "malformed":
            check(status == 400 and "error" in events[0], "malformed request %d: status %d %r" % (i, status, events))
        elif kind == "complete":
            usage = events[-1].get("usage") if events else None
            ok = (status == 200 and done and usage is not None and usage["completion_tokens"] == body["max_tokens"]
                  and events[-2]["choices"][0]["finish_reason"] == "length")
            check(ok, "load request %d: status %d done %s usage %r" % (i, status, done, usage))
            n_done += ok
        else:
            check(status == 200 and (hung_up or done), "disconnecting request %d: status %d" % (i, status))
    print("load: %d requests in %.1f s, %d completed in full" % (n, elapsed, n_done))
    # The server is still up, and once the aborts are processed no KV block is held.
    conn = http.client.HTTPConnection(host, port, timeout=30)
    conn.request("GET", "/health")
    check(conn.getresponse().status == 200, "/health after the load test")
    conn.close()
    used = running = None
    for _ in range(300):
        used = metric(host, port, "twofold_kv_blocks_used")
        running = metric(host, port, "twofold_num_requests_running")
        if used == 0 and running == 0:
            break
        time.sleep(0.1)
    check(used == 0, "KV blocks used after the load test: %s" % used)
    check(running == 0, "requests running after the load test: %s" % running)
    check(metric(host, port, "twofold_num_requests_waiting") == 0, "requests waiting after the load test")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--twofold", required=True, help="path of the twofold binary")
    ap.add_argument("--model", required=True, help="model folder (models/tiny-main)")
    ap.add_argument("--chat-template", required=True, help="template file for chats (examples/chatml.jinja)")
    ap.add_argument("--qwen3-config", required=True,
                    help="a tokenizer_config.json whose chat_template lists tools (tests/data/tokenizers/qwen3-151k)")
    args = ap.parse_args()
    p, host, port = start_server(args.twofold, args.model, "--served-model-name", "tiny-main",
                                 "--chat-template", args.chat_template)
    try:
        client = openai.OpenAI(base_url="http://%s:%d/v1" % (host, port), api_key="unused")
        test_completions(client, args.twofold, args.model)
        test_chat(client)
        test_json_mode(client)
        test_errors(client)
        test_load(host, port)
        check(p.poll() is None, "the server is still running after the tests")
    finally:
        if p.poll() is None:
            stop_server(p)
    test_api_key(args.twofold, args.model)
    test_no_chat_template(args.twofold, args.model)
    test_tools(args.twofold, args.model, args.qwen3_config)
    test_reasoning(args.twofold, args.model, args.chat_template)
    if failures:
        print("%d failures" % len(failures), file=sys.stderr)
        sys.exit(1)
    print("all OpenAI client checks passed")


if __name__ == "__main__":
    main()
