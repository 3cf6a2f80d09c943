"""`lumen inspect --context`: the KV cache a context needs, per geometry and dtype, from the seed
manifest (47 layers: 40 sliding 8x256 with window 1024, 7 full 1x512), and the up-front refusal of
a context over --memory-limit-mib (one line, exit 1, nothing on stdout)."""
from __future__ import annotations

import json

from conftest import run_lumen, shared_dir

MANIFEST = str(shared_dir() / "manifests" / "litert-gemma-4-12b-it.json")
FULL, SLIDING = 7, 40


def kv_json(*args):
    r = run_lumen("inspect", MANIFEST, "--json", *args)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["kvcache"]


def test_paged_f16_bytes_per_token_and_size_at_context():
    kv = kv_json("--context", "131072", "--kv-layout", "paged")  # the manifest's kvDtype is f16
    assert kv["full_layers_bytes_per_token"] == FULL * 2 * 1 * 512 * 2
    assert kv["sliding_layers_bytes_per_position"] == SLIDING * 2 * 8 * 256 * 2
    assert kv["sliding_layers_max_positions"] == 1280  # a ring of 5 pages of 256
    assert kv["bytes_at_context"] == 131072 * FULL * 2048 + 1280 * SLIDING * 8192


def test_int4_cold_tier_shrinks_the_full_layers():
    kv = kv_json("--context", "131072", "--kv-cold", "int4")
    assert kv["full_layers_cold_bytes_per_token"] == FULL * 2 * (256 + 16 * 4)  # codes + f32 scale per 32
    hot = kv_json("--context", "131072", "--kv-layout", "paged")
    assert kv["bytes_at_context"] < hot["bytes_at_context"] / 2


def test_context_over_the_memory_limit_is_refused_up_front():
    r = run_lumen("inspect", MANIFEST, "--context", "131072", "--memory-limit-mib", "1024")
    assert r.returncode == 1
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lumen: error: KV cache for a context of 131072 positions needs")
    assert "over the memory limit of 1024.0 MiB" in lines[0]
    # The same context fits under the limit with int4 cold pages.
    ok = run_lumen("inspect", MANIFEST, "--context", "131072", "--kv-cold", "int4", "--memory-limit-mib", "1024")
    assert ok.returncode == 0, ok.stderr


def test_bad_kv_flags_are_one_line_errors():
    for args, needle in [(["--kv-dtype", "f8"], "--kv-dtype"), (["--kv-cold", "int3"], "--kv-cold"),
                         (["--context", "999999"], "beyond the model's 131072 positions")]:
        r = run_lumen("inspect", MANIFEST, "--context", "100", *args) if args[0] != "--context" \
            else run_lumen("inspect", MANIFEST, *args)
        assert r.returncode == 1 and needle in r.stderr and r.stdout == "", (args, r.stderr)
