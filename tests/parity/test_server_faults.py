"""`lumen serve` under faults: a client that goes away cancels its sequence (streamed or not);
SIGTERM stops accepting, lets a running answer finish within --shutdown-timeout and exits 0,
or cancels what is still running when that time is up; the KV memory budget makes requests
wait or refuses them with 503 + Retry-After instead of growing; max_tokens beyond the context
is clamped (finish_reason "length"); --request-timeout cuts an answer ("length") or refuses a
request still queued (503); a model file truncated under the server is detected before the
next step reads it (503, /health says why). After each, the server's generation counters add
up: received = completed + cancelled + refused + failed."""
from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import threading
import time

import pytest

import server_support as ss

CHAT = "/v1/chat/completions"
NO_STOP = {"1": -100, "106": -100}  # eos and <end_of_turn> banned: runs until max_tokens


def body(max_tokens, stream=False, content="Tell me a long story."):
    return {"messages": [{"role": "user", "content": content}], "max_tokens": max_tokens, "logit_bias": NO_STOP,
            "temperature": 0, "stream": stream}


def outcomes(server) -> dict[str, float]:
    m = server.metrics()
    out = {k: m.get(f'lumen_generation_requests_finished_total{{outcome="{k}"}}', 0.0)
           for k in ("completed", "cancelled", "refused", "failed")}
    out["received"] = m["lumen_generation_requests_total"]
    out["in_flight"] = m["lumen_generation_requests_in_flight"]
    return out


def assert_counts_add_up(server):
    o = ss.wait_for(lambda: (lambda o: o if o["in_flight"] == 0 else None)(outcomes(server)), timeout=30)
    assert o, f"requests still in flight: {outcomes(server)}"
    assert o["received"] == o["completed"] + o["cancelled"] + o["refused"] + o["failed"], o
    return o


def open_request(server, payload):
    """Sends a request on a raw connection and returns the connection without reading."""
    conn = http.client.HTTPConnection(ss.HOST, server.port, timeout=120)
    conn.request("POST", CHAT, body=json.dumps(payload), headers={"Content-Type": "application/json"})
    return conn


def metric(server, name):
    return server.metrics().get(name, 0.0)


_full_answer = {}


def full_answer_seconds() -> float:
    """How long one whole 480-token answer takes here (once per run): the tiny model answers in
    about half a second on a fast idle CPU and several on a loaded one, so the limits that must
    cut an answer are set from it."""
    if "s" not in _full_answer:
        with ss.serve("--parallel", "1") as server:
            server.post(CHAT, body(2))  # weights paged in
            t0 = time.monotonic()
            status, resp, _ = server.post(CHAT, body(480), timeout=60)
            _full_answer["s"] = time.monotonic() - t0
            assert status == 200 and json.loads(resp)["usage"]["completion_tokens"] == 480, resp
    return _full_answer["s"]


def test_disconnect_cancels_non_streamed_and_streamed():
    with ss.serve("--parallel", "2") as server:
        for stream in (False, True):
            before = server.metrics()
            conn = open_request(server, body(480, stream=stream))
            assert ss.wait_for(lambda: metric(server, "lumen_active_sequences") == 1, timeout=30)
            if stream:  # read the first bytes, as a client that then loses interest
                resp = conn.getresponse()
                assert resp.status == 200
                resp.read1(64)
            # Let it decode a little, then go away.
            ss.wait_for(lambda: metric(server, "lumen_decode_tokens_total") > before.get("lumen_decode_tokens_total", 0) + 5)
            conn.sock.shutdown(socket.SHUT_RDWR)
            conn.close()
            t0 = time.monotonic()
            assert ss.wait_for(lambda: metric(server, "lumen_sequences_cancelled_total")
                               == before.get("lumen_sequences_cancelled_total", 0) + 1, timeout=20), server.metrics()
            assert time.monotonic() - t0 < 5, "the disconnect was noticed late"
            after = server.metrics()
            assert after["lumen_active_sequences"] == 0
            decoded = after["lumen_decode_tokens_total"] - before.get("lumen_decode_tokens_total", 0)
            assert decoded < 400, f"{decoded} tokens decoded for a client that left early"
        o = assert_counts_add_up(server)
        assert o["cancelled"] == 2, o


def test_sigterm_lets_a_running_answer_finish_and_exits_0():
    with ss.serve("--parallel", "2", "--shutdown-timeout", "60") as server:
        result = {}

        def ask():
            # A whole answer (~0.5 s on a fast idle CPU): long enough to be seen running by a
            # 50 ms poll (40 tokens once finished between two polls).
            result["status"], result["body"], _ = server.post(CHAT, body(480), timeout=120)

        t = threading.Thread(target=ask)
        t.start()
        assert ss.wait_for(lambda: metric(server, "lumen_active_sequences") == 1, timeout=30)
        t0 = time.monotonic()
        server.terminate()
        # No new connections once it drains.
        assert ss.wait_for(lambda: not _connects(server.port), timeout=10), "still accepting after SIGTERM"
        t.join(60)
        assert result.get("status") == 200, result
        answer = json.loads(result["body"])
        assert answer["usage"]["completion_tokens"] == 480 and answer["choices"][0]["finish_reason"] == "length"
        server.proc.wait(30)
        assert server.proc.returncode == 0, "\n".join(server.log[-20:])
        assert time.monotonic() - t0 < 30
        assert any("SIGTERM" in line and "in flight" in line for line in server.log), server.log[-10:]


def _connects(port) -> bool:
    try:
        socket.create_connection((ss.HOST, port), timeout=1).close()
        return True
    except OSError:
        return False


def test_sigterm_cancels_what_the_shutdown_timeout_cannot_wait_for():
    # Far shorter than the two answers (each at least a whole answer's time, sharing the CPU).
    limit = min(1.0, full_answer_seconds() / 5)
    with ss.serve("--parallel", "2", "--shutdown-timeout", f"{limit:.3f}") as server:
        results = {}

        def ask(stream):
            if stream:
                conn = open_request(server, body(480, stream=True))
                resp = conn.getresponse()
                results["stream"] = (resp.status, resp.read().decode())
            else:
                results["plain"] = server.post(CHAT, body(480), timeout=120)[:2]

        threads = [threading.Thread(target=ask, args=(s,)) for s in (False, True)]
        for t in threads:
            t.start()
        assert ss.wait_for(lambda: metric(server, "lumen_active_sequences") == 2, timeout=30)
        t0 = time.monotonic()
        server.terminate()
        server.proc.wait(20)
        elapsed = time.monotonic() - t0
        for t in threads:
            t.join(10)
        assert server.proc.returncode == 0, "\n".join(server.log[-20:])
        assert elapsed < limit + 10, f"took {elapsed:.1f} s to stop with --shutdown-timeout {limit:.3f}"
        status, text = results["plain"]
        assert status == 503 and json.loads(text)["error"]["code"] == "server_shutting_down", results["plain"]
        status, events = results["stream"]
        assert status == 200 and "server_shutting_down" in events and events.rstrip().endswith("data: [DONE]"), events
        assert any("cancelling 2" in line for line in server.log), server.log[-10:]


KV_TOKENS = 450  # each answer as long as the context allows: the first ones still run while the queue fills


def test_kv_memory_budget_makes_requests_wait_or_refuses_them():
    # 1 MiB holds a few of the tiny model's sequences at most, far fewer than the 6 slots.
    with ss.serve("--parallel", "6", "--queue", "0", "--kv-memory-mib", "1") as server:
        budget = metric(server, "lumen_kv_budget_bytes")
        assert budget == 1 << 20
        assert server.post(CHAT, body(2))[0] == 200  # weights and tokenizer paged in
        rss0 = metric(server, "process_resident_memory_bytes")
        conns = [open_request(server, body(KV_TOKENS))]
        assert ss.wait_for(lambda: metric(server, "lumen_active_sequences") == 1, timeout=30)
        per_sequence = metric(server, "lumen_kv_reserved_bytes")
        assert 0 < per_sequence <= budget
        fits = int(budget // per_sequence)
        assert 1 <= fits < 6, f"{fits} sequences of {per_sequence} bytes fit: the test needs fewer than the slots"
        for _ in range(fits - 1):
            conns.append(open_request(server, body(KV_TOKENS)))
        assert ss.wait_for(lambda: metric(server, "lumen_active_sequences") == fits, timeout=30)
        # The next ones wait for memory although slots are free...
        waiting = 6 - fits
        for i in range(waiting):
            conns.append(open_request(server, body(KV_TOKENS)))
            assert ss.wait_for(lambda: metric(server, "lumen_queue_depth") == i + 1, timeout=30)
        # (the gauge is set when the scheduler next looks at its queue, just after the submit)
        assert ss.wait_for(lambda: metric(server, "lumen_waiting_for_kv_memory") == 1, timeout=30)
        assert metric(server, "lumen_active_sequences") == fits
        # ... and once the queue is full of them, a newcomer gets a 503 with Retry-After.
        status, resp, headers = server.post(CHAT, body(KV_TOKENS))
        assert status == 503, resp
        assert json.loads(resp)["error"]["code"] == "kv_memory_exhausted"
        assert headers.get("Retry-After") == "1"
        assert metric(server, "lumen_kv_reserved_bytes") <= budget
        # Every request is answered in the end; memory never went past the budget.
        for conn in conns:
            resp = conn.getresponse()
            assert resp.status == 200
            assert json.loads(resp.read())["usage"]["completion_tokens"] == KV_TOKENS
        assert metric(server, "lumen_kv_reserved_bytes") == 0
        assert metric(server, "process_resident_memory_bytes") < rss0 + budget + (48 << 20)
        o = assert_counts_add_up(server)
        assert o["completed"] == 7 and o["refused"] == 1, o


def test_max_tokens_beyond_the_context_is_clamped():
    with ss.serve("--ctx-size", "64") as server:
        for stream in (False, True):
            status, resp, _ = server.post(CHAT, body(100000, stream=stream))
            assert status == 200, resp
            if stream:
                chunks = [json.loads(line[6:]) for line in resp.decode().splitlines()
                          if line.startswith("data: {")]
                assert chunks[-1]["choices"][0]["finish_reason"] == "length"
            else:
                answer = json.loads(resp)
                assert answer["choices"][0]["finish_reason"] == "length"
                assert answer["usage"]["prompt_tokens"] + answer["usage"]["completion_tokens"] == 64
        assert_counts_add_up(server)


def test_request_timeout_ends_the_answer_or_refuses_the_queued():
    # The limit is a third of what a whole 480-token answer takes on this machine (measured here:
    # the tiny model answers in about a second on a fast CPU), so a running answer is always cut.
    limit = f"{min(1.5, full_answer_seconds() / 3):.3f}"
    with ss.serve("--parallel", "1", "--queue", "8", "--request-timeout", limit) as server:
        results = {}

        def ask(name, request):
            results[name] = server.post(CHAT, request, timeout=60)

        first = threading.Thread(target=ask, args=("running", body(480)))
        first.start()
        assert ss.wait_for(lambda: metric(server, "lumen_active_sequences") == 1, timeout=30)
        # Six more behind it in the one slot. Each one that gets the slot keeps it until its own
        # limit, which ends just before the next one's (they arrived a moment apart), so whether a
        # queued request gets the slot or runs out first is a race: both outcomes are checked.
        queued = [threading.Thread(target=ask, args=(f"queued{i}", body(480))) for i in range(6)]
        for t in queued:
            t.start()
        for t in [first, *queued]:
            t.join(60)
        status, resp, _ = results["running"]
        assert status == 200, resp
        answer = json.loads(resp)
        assert answer["choices"][0]["finish_reason"] == "length"
        assert 0 < answer["usage"]["completion_tokens"] < 480
        answered = 0
        for i in range(6):
            status, resp, headers = results[f"queued{i}"]
            if status == 200:  # got the slot before its time ran out: cut like the first
                assert json.loads(resp)["choices"][0]["finish_reason"] == "length"
                answered += 1
            else:
                assert status == 503 and json.loads(resp)["error"]["code"] == "timeout", resp
                assert headers.get("Retry-After")
        # Deterministic refusal: two choices on one slot. The second waits for the first, which
        # holds the slot until their common limit runs out, so the second never starts.
        status, resp, headers = server.post(CHAT, {**body(480), "n": 2}, timeout=60)
        assert status == 503 and json.loads(resp)["error"]["code"] == "timeout", resp
        assert headers.get("Retry-After")
        status, resp, _ = server.post(CHAT, body(480, stream=True), timeout=60)
        assert status == 200
        last = [json.loads(line[6:]) for line in resp.decode().splitlines() if line.startswith("data: {")][-1]
        assert last["choices"][0]["finish_reason"] == "length"
        assert metric(server, "lumen_generation_time_limited_total") == 2 + answered
        o = assert_counts_add_up(server)
        assert o["completed"] == 2 + answered and o["refused"] == 6 - answered + 1, o  # and the two-choice request


def test_model_file_truncated_under_the_server(tmp_path):
    model = tmp_path / "model"
    shutil.copytree(ss.served_model(), model)
    weights = model / "model.safetensors"
    assert weights.is_file()
    with ss.serve("--parallel", "1", model=model) as server:
        status, resp, _ = server.post(CHAT, body(4))
        assert status == 200, resp
        os.truncate(weights, weights.stat().st_size // 2)
        status, resp, _ = server.post(CHAT, body(4))
        assert status == 503, resp
        err = json.loads(resp)["error"]
        assert err["code"] == "model_unavailable" and "truncated" in err["message"], err
        status, resp, _ = server.get("/health")
        assert status == 503 and "truncated" in json.loads(resp)["reason"]
        status, resp, _ = server.post(CHAT, body(4))  # refused before any step from now on
        assert status == 503
        assert_counts_add_up(server)
