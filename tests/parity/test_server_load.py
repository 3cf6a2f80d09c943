"""A bounded load test of `lumen serve` on loopback: 8 concurrent clients x 10 requests (chat and
completions, streaming and not) on the tiny model. Every request is answered completely or with
a clean JSON error, the server does not crash, and its resident memory returns near the baseline
afterwards (no sequence or connection is leaked)."""
from __future__ import annotations

import json
import threading

import pytest

import server_support as ss
from conftest import record

openai = pytest.importorskip("openai")

CLIENTS = 8
REQUESTS_EACH = 10


def one_request(client, i: int, j: int) -> str:
    """Returns a problem description, or '' when the answer was complete or a clean error."""
    kind = (i + j) % 4
    try:
        if kind == 0:
            r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": f"Count to {j}"}],
                                               max_tokens=8, seed=i * 100 + j)
            ok = r.choices[0].finish_reason in ("stop", "length") and r.usage.completion_tokens >= 1
        elif kind == 1:
            chunks = list(client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": f"Client {i} says {j}"}], max_tokens=8,
                stream=True, stream_options={"include_usage": True}, seed=j))
            ok = chunks[-1].usage is not None and any(c.choices and c.choices[0].finish_reason for c in chunks)
        elif kind == 2:
            r = client.completions.create(model="m", prompt=f"Item {i}.{j}:", max_tokens=8, temperature=0.0)
            ok = r.choices[0].finish_reason in ("stop", "length")
        else:
            chunks = list(client.completions.create(model="m", prompt=f"Story {j}", max_tokens=8, stream=True))
            ok = any(c.choices and c.choices[0].finish_reason for c in chunks)
        return "" if ok else f"client {i} request {j}: incomplete answer"
    except openai.RateLimitError as e:  # a clean refusal (429 with an error object) is allowed
        return "" if e.body and "message" in e.body else f"client {i} request {j}: 429 without an error object"
    except Exception as e:  # noqa: BLE001 - every other failure is a problem to report
        return f"client {i} request {j}: {type(e).__name__}: {e}"


def test_eight_clients_ten_requests_each():
    with ss.serve("--parallel", "4", "--queue", "16") as server:
        client = openai.OpenAI(base_url=server.url("/v1"), api_key="x", max_retries=0, timeout=60)
        # Baseline after a warm-up, once the allocator and thread pools have their working set.
        for _ in range(4):
            one_request(client, 0, 0)
        baseline = server.metrics()["process_resident_memory_bytes"]

        problems: list[str] = []
        lock = threading.Lock()

        def worker(i):
            for j in range(REQUESTS_EACH):
                p = one_request(client, i, j)
                if p:
                    with lock:
                        problems.append(p)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not any(t.is_alive() for t in threads), "clients still waiting after 120 s"
        assert not problems, "\n".join(problems[:10])
        assert server.alive()

        m = server.metrics()
        answered = sum(v for k, v in m.items() if k.startswith("lumen_requests_total{endpoint=\"/v1/")
                       and ('status="200"' in k or 'status="429"' in k))
        assert answered >= CLIENTS * REQUESTS_EACH
        assert m["lumen_active_sequences"] == 0 and m["lumen_queue_depth"] == 0
        after = m["process_resident_memory_bytes"]
        record("server", "load_8x10", {"rss_baseline_mb": baseline / 2**20, "rss_after_mb": after / 2**20,
                                       "completed": m["lumen_sequences_completed_total"],
                                       "rejected": m["lumen_requests_rejected_total"]})
        assert after <= baseline * 1.25 + 32 * 2**20, f"RSS grew from {baseline/2**20:.1f} to {after/2**20:.1f} MiB"
