"""The chat page at / in headless Chromium (Debian's, driven by Playwright for Python; Playwright's
own browser downloads are never used): it shows the model's name, streams an answer token by
token, keeps the conversation (multi-turn), and the stop button ends a generation. A screenshot
is saved under LUMEN_WORK_DIR/server/."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

import server_support as ss
from conftest import work_dir

sync_api = pytest.importorskip("playwright.sync_api")

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def server():
    with ss.serve("--parallel", "2") as s:
        yield s


@pytest.fixture()
def page(server):
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: scripts/setup --test installs Debian's chromium")
    profile = Path(tempfile.mkdtemp(prefix="lumen-chromium-"))
    try:
        with sync_api.sync_playwright() as p:
            context = p.chromium.launch_persistent_context(
                str(profile), executable_path=CHROMIUM, headless=True, args=ARGS, timeout=60_000)
            try:
                pg = context.new_page()
                pg.set_default_timeout(30_000)
                # Only the server on loopback may be reached.
                pg.route("**/*", lambda route: route.continue_() if route.request.url.startswith(server.base)
                         else route.abort())
                pg.goto(server.url("/"))
                yield pg
            finally:
                context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def set_max_tokens(page, n):
    page.fill("#max-tokens", str(n))


def test_chat_streams_multi_turn_and_stops(server, page):
    sync_api.expect(page.locator("#model-name")).to_have_text(server.name)

    # Turn 1: a short answer, streamed into the page.
    set_max_tokens(page, 12)
    page.fill("#input", "Hello, who are you?")
    page.click("#send")
    answer = page.locator(".msg.assistant").nth(0)
    sync_api.expect(page.locator("body")).to_have_attribute("data-state", "idle", timeout=30_000)
    finish = answer.get_attribute("data-finish")
    assert finish in ("stop", "length"), finish
    first_text = answer.evaluate("el => el.firstChild ? el.firstChild.textContent : ''")
    assert first_text, "no answer text"
    sync_api.expect(page.locator("#speed")).to_contain_text("tokens/s")

    # Turn 2 carries the history: the server sees a longer prompt than turn 1's.
    before = server.metrics()["lumen_prompt_tokens_total"]
    page.fill("#input", "Tell me more.")
    page.click("#send")
    sync_api.expect(page.locator(".msg.assistant")).to_have_count(2)
    sync_api.expect(page.locator("body")).to_have_attribute("data-state", "idle", timeout=30_000)
    turn2_prompt = server.metrics()["lumen_prompt_tokens_total"] - before
    assert turn2_prompt > 20, f"turn 2 prompt was only {turn2_prompt} tokens: history not sent"
    assert page.locator(".msg.user").count() == 2

    # Turn 3: a long generation, stopped while it streams; the text grows before the stop.
    set_max_tokens(page, 4000)
    page.fill("#temperature", "1.0")
    page.fill("#input", "Write a very long story.")
    page.click("#send")
    third = page.locator(".msg.assistant").nth(2)
    sync_api.expect(page.locator("body")).to_have_attribute("data-state", "streaming")
    page.wait_for_function("() => document.querySelectorAll('.msg.assistant')[2].textContent.length > 20")
    grown = len(third.text_content())
    page.wait_for_function(
        f"() => document.querySelectorAll('.msg.assistant')[2].textContent.length > {grown}")
    page.click("#stop")
    sync_api.expect(page.locator("body")).to_have_attribute("data-state", "idle")
    assert third.get_attribute("data-finish") == "stopped"
    sync_api.expect(third.locator(".note")).to_contain_text("stopped")

    # The server frees the stopped sequence.
    assert ss.wait_for(lambda: server.metrics()["lumen_active_sequences"] == 0), server.metrics()
    assert server.metrics()["lumen_sequences_cancelled_total"] >= 1

    out = work_dir() / "server"
    out.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(out / "chat_page.png"), full_page=True)
    assert (out / "chat_page.png").stat().st_size > 1000
