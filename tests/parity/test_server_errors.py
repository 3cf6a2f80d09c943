"""Bad requests to `lumen serve` each get a 4xx with an OpenAI-style error object, and the
server keeps serving: malformed JSON, wrong types, unknown roles, a prompt longer than the
context, an oversize body, no or a wrong API key, a full queue (429). A client that disconnects
mid-stream frees its sequence."""
from __future__ import annotations

import http.client
import json

import pytest

import server_support as ss

CHAT = "/v1/chat/completions"
HELLO = [{"role": "user", "content": "hello"}]
NO_STOP = {"1": -100, "106": -100}  # eos and <end_of_turn> banned: runs until max_tokens


def error_of(status, body, want_status, want_code=None, want_param=None):
    assert status == want_status, body
    err = json.loads(body)["error"]
    assert set(err) == {"message", "type", "param", "code"}, err
    assert isinstance(err["message"], str) and err["message"] and "\n" not in err["message"]
    if want_code:
        assert err["code"] == want_code, err
    if want_param:
        assert err["param"] == want_param, err
    return err


def still_serving(server, headers=None):
    status, body, _ = server.post(CHAT, {"messages": HELLO, "max_tokens": 2}, headers=headers)
    assert status == 200, body
    assert json.loads(body)["usage"]["completion_tokens"] >= 1


@pytest.fixture(scope="module")
def server():
    with ss.serve("--parallel", "2", "--ctx-size", "96", "--max-body-bytes", "8192") as s:
        yield s


@pytest.mark.parametrize("body,code,param", [
    (b"{not json", "invalid_json", None),
    (b"[1,2]", "invalid_json", None),
    ({"messages": "hello"}, "invalid_type", "messages"),
    ({"messages": []}, "invalid_value", "messages"),
    ({"messages": [{"role": "wizard", "content": "hi"}]}, "invalid_value", "messages[0].role"),
    ({"messages": HELLO, "temperature": "warm"}, "invalid_type", "temperature"),
    ({"messages": HELLO, "max_tokens": -5}, "invalid_value", "max_tokens"),
    ({"messages": HELLO, "n": 17}, "invalid_value", "n"),
    ({"messages": HELLO, "logit_bias": {"99999999": 5}}, "invalid_value", None),
    ({"messages": HELLO, "stop": [1, 2]}, "invalid_type", "stop"),
])
def test_malformed_requests(server, body, code, param):
    status, resp, _ = server.post(CHAT, body)
    error_of(status, resp, 400, code, param)


def test_message_order_the_format_cannot_express(server):
    # The served tiny model speaks Gemma 4, whose template renders a later system turn (Gemma 3's
    # refuses it: tests/unit/test_chat_format.cpp); a tool result that answers no call cannot be
    # rendered by either.
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    orphan = [HELLO[0], {"role": "assistant", "content": "", "tool_calls": [call]},
              {"role": "tool", "tool_call_id": "c2", "content": "1"}]
    status, resp, _ = server.post(CHAT, {"messages": orphan})
    err = error_of(status, resp, 400, want_param="messages")
    assert "tool_call_id" in err["message"], err
    status, resp, _ = server.post(CHAT, {"messages": [HELLO[0], {"role": "system", "content": "late"}], "max_tokens": 2})
    assert status == 200, resp
    still_serving(server)


def test_prompt_longer_than_context(server):
    long = [{"role": "user", "content": "word " * 200}]
    status, resp, _ = server.post(CHAT, {"messages": long})
    err = error_of(status, resp, 400, "context_length_exceeded", "messages")
    assert "96" in err["message"]
    status, resp, _ = server.post("/v1/completions", {"prompt": list(range(2, 200))})
    error_of(status, resp, 400, "context_length_exceeded", "prompt")
    status, resp, _ = server.post("/v1/completions", {"prompt": [2, 300000]})
    error_of(status, resp, 400, "invalid_value", "prompt")
    still_serving(server)


def test_oversize_body(server):
    big = {"messages": [{"role": "user", "content": "x" * 20000}]}
    status, resp, _ = server.post(CHAT, big)
    error_of(status, resp, 413, "request_too_large")
    still_serving(server)


def test_unknown_endpoint(server):
    status, resp, _ = server.get("/v1/nothing")
    error_of(status, resp, 404, "not_found")


def test_disconnect_mid_stream_frees_the_sequence(server):
    before = server.metrics()
    conn = http.client.HTTPConnection(ss.HOST, server.port, timeout=30)
    body = json.dumps({"messages": HELLO, "stream": True, "max_tokens": 90, "logit_bias": NO_STOP,
                       "temperature": 0.0})
    conn.request("POST", CHAT, body=body, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200
    assert resp.getheader("Content-Type").startswith("text/event-stream")
    seen = b""
    while seen.count(b"data: ") < 4:
        seen += resp.read1(4096)
    conn.sock.close()  # the client goes away mid-stream
    conn.close()

    def freed():
        m = server.metrics()
        return (m["lumen_sequences_cancelled_total"] == before["lumen_sequences_cancelled_total"] + 1
                and m["lumen_active_sequences"] == 0) and m
    m = ss.wait_for(freed, timeout=20)
    assert m, f"the sequence was not freed: {server.metrics()}"
    # It stopped early: far fewer than the 90 tokens it was allowed were decoded.
    assert m["lumen_decode_tokens_total"] - before["lumen_decode_tokens_total"] < 80
    still_serving(server)


def test_full_queue_gets_429():
    # One slot, one waiting place: a third concurrent request is refused.
    with ss.serve("--parallel", "1", "--queue", "1", "--ctx-size", "4096") as server:
        conns = []
        try:
            for _ in range(2):
                c = http.client.HTTPConnection(ss.HOST, server.port, timeout=30)
                c.request("POST", CHAT, body=json.dumps({"messages": HELLO, "stream": True, "max_tokens": 4000,
                                                         "logit_bias": NO_STOP}),
                          headers={"Content-Type": "application/json"})
                conns.append(c)
            assert ss.wait_for(lambda: (lambda m: m["lumen_active_sequences"] == 1 and m["lumen_queue_depth"] == 1)(
                server.metrics())), server.metrics()
            status, resp, headers = server.post(CHAT, {"messages": HELLO, "max_tokens": 2})
            err = error_of(status, resp, 429, "queue_full")
            assert err["type"] == "rate_limit_error"
            assert headers.get("Retry-After") == "1"
            assert server.metrics()["lumen_requests_rejected_total"] == 1
        finally:
            for c in conns:
                c.close()
        # Both streams were cut by their clients: the slot and the queue drain.
        assert ss.wait_for(lambda: (lambda m: m["lumen_active_sequences"] == 0 and m["lumen_queue_depth"] == 0)(
            server.metrics())), server.metrics()
        still_serving(server)


def test_api_key():
    key = "s3cret-key"
    with ss.serve("--api-key", key) as server:
        for headers, code in [(None, 401), ({"Authorization": "Bearer wrong"}, 401),
                              ({"Authorization": key}, 401), ({"Authorization": "Basic " + key}, 401)]:
            status, resp, hdrs = server.post(CHAT, {"messages": HELLO, "max_tokens": 2}, headers=headers)
            err = error_of(status, resp, code, "invalid_api_key")
            assert err["type"] == "authentication_error"
            status, resp, _ = server.get("/v1/models", headers=headers)
            error_of(status, resp, 401)
            status, resp, _ = server.get("/metrics", headers=headers)
            error_of(status, resp, 401)
        good = {"Authorization": "Bearer " + key}
        assert server.get("/v1/models", headers=good)[0] == 200
        assert server.get("/health")[0] == 200  # liveness needs no key
        still_serving(server, headers=good)
        m = server.metrics(headers=good)
        assert m['lumen_requests_total{endpoint="/v1/chat/completions",status="401"}'] == 4
