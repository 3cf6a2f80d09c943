"""A short bounded soak of `lumen serve` (tools/soak_server.py): 8 clients for 40 s on the tiny
model with the real Gemma tokenizer, random prompts and parameters, streamed and not, random
disconnects, malformed requests and garbage interleaved, SIGTERM during a last wave. Every
request is answered, refused cleanly or cancelled; the server's counters add up; peak RSS
stays under baseline + KV budget + 96 MiB; the server exits 0. The long run and its figures:
docs/reliability.md."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import server_support as ss
from conftest import lumen_bin, work_dir

TOOL = Path(__file__).resolve().parents[2] / "tools" / "soak_server.py"


def test_soak():
    out = work_dir() / "server" / "soak.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([sys.executable, str(TOOL), "--lumen", lumen_bin(), "-m", str(ss.served_model()),
                           "--seconds", "40", "--clients", "8", "--parallel", "4", "--queue", "4",
                           "--kv-memory-mib", "16", "--json", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads(out.read_text())
    assert summary["by_outcome"].get("lost", 0) == 0
    assert summary["requests"] >= 40, summary
    assert summary["by_outcome"].get("cancelled", 0) > 0 and summary["by_outcome"].get("refused", 0) > 0, summary
    assert summary["exit_status"] == 0
