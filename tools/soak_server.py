#!/usr/bin/env python3
"""A bounded soak test of `lumen serve` on loopback.

    soak_server.py --lumen build/lumen -m MODEL [--seconds 60] [--clients 8] [--json out.json]

Many clients at once, for a bounded time and number of requests: chat and completion
requests with random prompts and parameters, streamed and not; some clients go away
mid-answer; malformed requests interleaved (bad JSON, wrong types, unknown roles, invalid
UTF-8, deep nesting, oversize bodies, garbage instead of HTTP). At the end a last wave of
requests is started and the server gets SIGTERM while they run.

Checks (exit status 1 if any fails):
  - every request is answered (200 with a complete answer, or a complete stream ending in
    [DONE]), refused cleanly (4xx, 429, 503 with an error object), or cancelled by its client;
    nothing is lost (a reset, a timeout, a 5xx other than 503, a stream cut without its end);
  - the server's counters add up: generation requests received = completed + cancelled +
    refused + failed, and received = the generation requests the clients sent;
  - peak RSS (VmHWM) stays under the stated bound: RSS after start + the KV budget + slack;
  - after SIGTERM the last wave ends (answered, or 503 / an error event: shutting down) and
    the server exits 0 within --shutdown-timeout + 5 s.
Prints requests by outcome, peak RSS and p50/p99 latency of completed requests. Test tool only.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter

HOST = "127.0.0.1"
BANNER = re.compile(r"^lumen: serving (\S+) on http://127\.0\.0\.1:(\d+) ")
WORDS = ("the a model token server cancel drain memory budget river stone light quick brown fox jumps over "
         "lazy dog été naïve 日本 🙂 0 1 42 <b> \\n").split()


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.outcomes: Counter = Counter()   # completed / refused / cancelled / lost
        self.kinds: Counter = Counter()
        self.latencies: list[float] = []
        self.lost: list[str] = []
        self.generation_sent = 0             # requests to the generation endpoints fully sent

    def add(self, kind, outcome, latency=None, why=""):
        with self.lock:
            self.kinds[kind] += 1
            self.outcomes[outcome] += 1
            if outcome == "completed" and latency is not None:
                self.latencies.append(latency)
            if outcome == "lost":
                self.lost.append(f"{kind}: {why}"[:300])

    def sent(self):
        with self.lock:
            self.generation_sent += 1


def read_rss(pid, field="VmRSS") -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def random_text(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n))


def random_params(rng):
    p = {}
    if rng.random() < 0.7:
        p["max_tokens"] = rng.randint(1, 48)
    if rng.random() < 0.5:
        p["temperature"] = round(rng.uniform(0, 1.5), 2)
    if rng.random() < 0.3:
        p["top_p"] = round(rng.uniform(0.1, 1), 2)
    if rng.random() < 0.3:
        p["top_k"] = rng.randint(0, 50)
    if rng.random() < 0.2:
        p["min_p"] = round(rng.uniform(0, 0.3), 2)
    if rng.random() < 0.4:
        p["seed"] = rng.randint(0, 2**31)
    if rng.random() < 0.2:
        p["stop"] = [rng.choice(WORDS) for _ in range(rng.randint(1, 4))]
    if rng.random() < 0.2:
        p["presence_penalty"] = round(rng.uniform(-1, 1), 2)
    if rng.random() < 0.1:
        p["logit_bias"] = {str(rng.randint(0, 1000)): rng.uniform(-5, 5)}
    return p


def valid_body(rng, chat):
    if chat:
        msgs = []
        if rng.random() < 0.3:
            msgs.append({"role": "system", "content": random_text(rng, rng.randint(1, 8))})
        for i in range(rng.choice([1, 1, 1, 3])):
            msgs.append({"role": "user" if i % 2 == 0 else "assistant", "content": random_text(rng, rng.randint(1, 40))})
        return {"messages": msgs, **random_params(rng)}
    prompt = random_text(rng, rng.randint(1, 60)) if rng.random() < 0.8 else [2] + [rng.randint(3, 200) for _ in range(5)]
    return {"prompt": prompt, **random_params(rng)}


MALFORMED = [
    ("bad_json", lambda rng: b'{"messages": [{"role": "user", "content": "hi"}'),
    ("wrong_type", lambda rng: json.dumps({"messages": "hi"}).encode()),
    ("unknown_role", lambda rng: json.dumps({"messages": [{"role": "wizard", "content": "x"}]}).encode()),
    ("bad_value", lambda rng: json.dumps({"messages": [{"role": "user", "content": "x"}], "max_tokens": -3}).encode()),
    ("bad_utf8", lambda rng: b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}'),
    ("deep_json", lambda rng: b'{"messages": ' + b"[" * 5000 + b"]" * 5000 + b"}"),
    ("oversize", lambda rng: json.dumps({"messages": [{"role": "user", "content": "x" * (2 << 20)}]}).encode()),
    ("empty_body", lambda rng: b""),
]


class Client(threading.Thread):
    def __init__(self, index, args, port, tally, stop_at, budget):
        super().__init__(daemon=True)
        self.rng = random.Random(args.seed * 1000 + index)
        self.args, self.port, self.tally, self.stop_at, self.budget = args, port, tally, stop_at, budget

    def run(self):
        while time.monotonic() < self.stop_at and self.budget.take():
            r = self.rng.random()
            try:
                if r < 0.65:
                    self.generation(stream=self.rng.random() < 0.5, chat=self.rng.random() < 0.7,
                                    disconnect=self.rng.random() < self.args.disconnect_rate)
                elif r < 0.90:
                    self.malformed()
                elif r < 0.95:
                    self.garbage()
                else:
                    self.probe()
            except Exception as e:  # noqa: BLE001 - anything unexpected is a lost request
                self.tally.add("client", "lost", why=repr(e))

    def connect(self, timeout=None):
        return http.client.HTTPConnection(HOST, self.port, timeout=timeout or self.args.request_timeout)

    def generation(self, stream, chat, disconnect, tally=None):
        tally = tally or self.tally
        kind = ("chat" if chat else "completion") + ("_stream" if stream else "") + ("_disconnect" if disconnect else "")
        payload = valid_body(self.rng, chat)
        payload["stream"] = stream
        path = "/v1/chat/completions" if chat else "/v1/completions"
        conn = self.connect()
        t0 = time.monotonic()
        try:
            conn.request("POST", path, body=json.dumps(payload), headers={"Content-Type": "application/json"})
            tally.sent()
            if disconnect and not stream:
                time.sleep(self.rng.uniform(0.05, 1.0))
                conn.sock.shutdown(socket.SHUT_RDWR)
                tally.add(kind, "cancelled")
                return
            resp = conn.getresponse()
            if resp.status != 200:
                return self.refusal(kind, resp)
            if not stream:
                answer = json.loads(resp.read())
                ok = answer["choices"][0]["finish_reason"] in ("stop", "length") and "usage" in answer
                return tally.add(kind, "completed" if ok else "lost", time.monotonic() - t0, json.dumps(answer)[:200])
            chunks, finish, events = 0, None, []
            cut_after = self.rng.randint(1, 12) if disconnect else None
            for raw in resp:
                line = raw.decode().rstrip("\n")
                if not line.startswith("data: "):
                    continue
                events.append(line)
                if line == "data: [DONE]":
                    break
                obj = json.loads(line[6:])
                if "error" in obj:
                    return tally.add(kind, "lost", why=line)
                if obj.get("choices"):
                    finish = obj["choices"][0].get("finish_reason") or finish
                chunks += 1
                if cut_after is not None and chunks >= cut_after:
                    conn.sock.shutdown(socket.SHUT_RDWR)
                    return tally.add(kind, "cancelled")
            if events and events[-1] == "data: [DONE]" and finish in ("stop", "length"):
                return tally.add(kind, "completed", time.monotonic() - t0)
            if disconnect:  # the answer ended before the client meant to leave
                return tally.add(kind, "completed", time.monotonic() - t0)
            tally.add(kind, "lost", why=f"stream without its end: {events[-3:]}")
        finally:
            conn.close()

    def refusal(self, kind, resp):
        text = resp.read()
        try:
            err = json.loads(text)["error"]
            clean = (400 <= resp.status < 500 or resp.status == 503) and err["message"] and "\n" not in err["message"]
        except (ValueError, KeyError, TypeError):
            clean = False
        if clean and resp.status in (429, 503) and not resp.getheader("Retry-After") \
                and err.get("code") not in ("server_shutting_down",):
            clean = False
        self.tally.add(kind, "refused" if clean else "lost", why=f"{resp.status} {text[:200]!r}")

    def malformed(self):
        name, make = self.rng.choice(MALFORMED)
        path = self.rng.choice(["/v1/chat/completions", "/v1/completions"])
        data = make(self.rng)
        conn = self.connect()
        try:
            conn.request("POST", path, body=data, headers={"Content-Type": "application/json"})
            if name != "oversize":  # a 413 is answered before the handler: not a generation request
                self.tally.sent()
            resp = conn.getresponse()
            if resp.status == 200:
                return self.tally.add("malformed_" + name, "lost", why="accepted")
            self.refusal("malformed_" + name, resp)
        except (ConnectionResetError, BrokenPipeError) as e:
            # the server may answer 413 and close before the whole oversize body is sent
            self.tally.add("malformed_" + name, "refused" if name == "oversize" else "lost", why=repr(e))
        finally:
            conn.close()

    def garbage(self):
        s = socket.create_connection((HOST, self.port), timeout=30)
        try:
            s.sendall(self.rng.choice([b"GARBAGE\r\n\r\n", b"GET /nowhere HTTP/1.1\r\n\r\n", b"\x00\xff" * 64 + b"\r\n\r\n",
                                       b"POST /v1/completions HTTP/1.1\r\nContent-Length: 5\r\n\r\n{"]))
            s.shutdown(socket.SHUT_WR)
            data = b""
            while True:
                got = s.recv(4096)
                if not got:
                    break
                data += got
            ok = data.startswith(b"HTTP/1.1 4") or data == b""
            self.tally.add("garbage", "refused" if ok else "lost", why=repr(data[:100]))
        finally:
            s.close()

    def probe(self):
        conn = self.connect(30)
        try:
            conn.request("GET", self.rng.choice(["/health", "/metrics", "/v1/models"]))
            resp = conn.getresponse()
            resp.read()
            self.tally.add("probe", "completed" if resp.status == 200 else "lost", why=str(resp.status))
        finally:
            conn.close()


class Budget:
    def __init__(self, n):
        self.n, self.lock = n, threading.Lock()

    def take(self):
        with self.lock:
            if self.n <= 0:
                return False
            self.n -= 1
            return True


def server_metrics(port) -> dict[str, float]:
    conn = http.client.HTTPConnection(HOST, port, timeout=30)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out


def percentile(values, q):
    if not values:
        return 0.0
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lumen", required=True)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--max-requests", type=int, default=100000)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--queue", type=int, default=4)
    ap.add_argument("--kv-memory-mib", type=int, default=32)
    ap.add_argument("--ctx-size", type=int, default=256)
    ap.add_argument("--shutdown-timeout", type=float, default=3)
    ap.add_argument("--disconnect-rate", type=float, default=0.2)
    ap.add_argument("--request-timeout", type=float, default=120, help="client socket timeout (s)")
    ap.add_argument("--rss-slack-mib", type=int, default=96, help="allowed growth beyond the KV budget")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", help="write the summary here")
    args = ap.parse_args(argv)

    cmd = [args.lumen, "serve", "-m", args.model, "--host", HOST, "--port", "0", "--parallel", str(args.parallel),
           "--queue", str(args.queue), "--kv-memory-mib", str(args.kv_memory_mib), "--ctx-size", str(args.ctx_size),
           "--shutdown-timeout", str(args.shutdown_timeout), "--max-body-bytes", str(1 << 20)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log, port = [], None
    ready = threading.Event()

    def pump():
        nonlocal port
        for line in proc.stdout:
            log.append(line.rstrip("\n"))
            m = BANNER.match(line)
            if m and port is None:
                port = int(m.group(2))
                ready.set()
        ready.set()

    threading.Thread(target=pump, daemon=True).start()
    ready.wait(120)
    if port is None:
        print("the server did not start:\n" + "\n".join(log[-20:]), file=sys.stderr)
        proc.kill()
        return 1

    peak = {"rss": 0}
    sampling = threading.Event()

    def sample():
        while not sampling.is_set():
            peak["rss"] = max(peak["rss"], read_rss(proc.pid))
            time.sleep(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    # Warm up (first request maps and touches the weights), then measure the baseline.
    warm = Client(0, args, port, Tally(), time.monotonic() + 60, Budget(1))
    warm.generation(stream=False, chat=True, disconnect=False)
    baseline = read_rss(proc.pid)

    tally = Tally()
    t_start = time.monotonic()
    stop_at = t_start + args.seconds
    budget = Budget(args.max_requests)
    clients = [Client(i + 1, args, port, tally, stop_at, budget) for i in range(args.clients)]
    for c in clients:
        c.start()
    for c in clients:
        c.join()
    elapsed = time.monotonic() - t_start

    # Counters once nothing is in flight.
    deadline = time.monotonic() + 30
    m = server_metrics(port)
    while m.get("lumen_generation_requests_in_flight", 0) > 0 and time.monotonic() < deadline:
        time.sleep(0.1)
        m = server_metrics(port)
    outcomes = {k: m.get(f'lumen_generation_requests_finished_total{{outcome="{k}"}}', 0.0)
                for k in ("completed", "cancelled", "refused", "failed")}
    received = m.get("lumen_generation_requests_total", 0) - warm.tally.generation_sent

    # The last wave, and SIGTERM while it runs.
    final = Tally()
    wave = []
    for i in range(args.parallel):
        c = Client(1000 + i, args, port, final, time.monotonic() + 60, Budget(1))
        t = threading.Thread(target=lambda c=c: c.generation(stream=bool(i % 2), chat=True, disconnect=False,
                                                             tally=final), daemon=True)
        wave.append(t)
        t.start()
    time.sleep(0.3)
    t_term = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        rc = proc.wait(args.shutdown_timeout + 5)
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = "killed (did not stop in time)"
    stop_seconds = time.monotonic() - t_term
    for t in wave:
        t.join(10)
    sampling.set()
    sampler.join(1)

    hwm = peak["rss"]
    budget_bytes = m.get("lumen_kv_budget_bytes", 0)
    bound = baseline + budget_bytes + args.rss_slack_mib * (1 << 20)
    summary = {
        "seconds": round(elapsed, 1),
        "clients": args.clients,
        "requests": sum(tally.outcomes.values()),
        "by_outcome": dict(tally.outcomes),
        "by_kind": dict(tally.kinds),
        "lost": tally.lost[:20],
        "server": {"received": received, **outcomes},
        "generation_requests_sent": tally.generation_sent,
        "latency_s": {"p50": round(percentile(tally.latencies, 0.5), 3), "p99": round(percentile(tally.latencies, 0.99), 3)},
        "rss_mib": {"baseline": round(baseline / 2**20, 1), "peak": round(hwm / 2**20, 1),
                    "bound": round(bound / 2**20, 1), "kv_budget": round(budget_bytes / 2**20, 1)},
        "final_wave": dict(final.outcomes), "final_lost": final.lost,
        "exit_status": rc, "stop_seconds": round(stop_seconds, 2),
    }
    problems = []
    if tally.outcomes["lost"]:
        problems.append(f"{tally.outcomes['lost']} requests lost")
    if final.outcomes["lost"]:
        problems.append(f"{final.outcomes['lost']} requests of the last wave lost")
    if outcomes["failed"]:
        problems.append(f"{outcomes['failed']} requests failed on the server")
    total = sum(outcomes.values()) - sum(warm.tally.outcomes.values())
    if received != total:
        problems.append(f"received {received} != completed + cancelled + refused + failed {total}")
    if received != tally.generation_sent:
        problems.append(f"the server received {received} generation requests, the clients sent {tally.generation_sent}")
    if hwm > bound:
        problems.append(f"peak RSS {hwm / 2**20:.1f} MiB over the bound {bound / 2**20:.1f} MiB")
    if rc != 0:
        problems.append(f"exit status {rc} after SIGTERM")
    summary["problems"] = problems
    text = json.dumps(summary, indent=2, ensure_ascii=False)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    if problems:
        print("soak: FAILED: " + "; ".join(problems), file=sys.stderr)
        print("\n".join(log[-30:]), file=sys.stderr)
        return 1
    print("soak: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
