"""The live page (/llmsim/ui) in a real browser: Playwright driving Debian's Chromium, headless.

The browser tests skip with a reason when no Chromium is found, except under ``CI=true``, where they
fail (.ci/run installs Debian's ``chromium`` when it runs as root). ``LLMSIM_CHROMIUM`` names another
binary. Playwright never downloads a browser here: it is given ``executable_path``.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from pytest_llmsim import LLMBackend, step, window

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 20}


def chromium_path() -> str | None:
    return os.environ.get("LLMSIM_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    path = chromium_path()
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail("no Chromium found under CI=true: install Debian's chromium (.ci/run does, as root) "
                        "or set LLMSIM_CHROMIUM")
        pytest.skip("no Chromium found: install Debian's chromium package or set LLMSIM_CHROMIUM")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=path)
        yield launched
        launched.close()


class Page:
    """A browser page on the live page, collecting console errors and every URL it asked for."""

    def __init__(self, browser: Any, url: str) -> None:
        self.page = browser.new_page()
        self.errors: list[str] = []
        self.requested: list[str] = []
        self.page.on("console", lambda message: self.errors.append(message.text) if message.type == "error" else None)
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))
        self.page.on("request", lambda request: self.requested.append(request.url))
        self.page.goto(url)

    def text(self, selector: str) -> str:
        return str(self.page.inner_text(selector))


@pytest.fixture
def live(browser: Any, llm_backend: LLMBackend) -> Iterator[Page]:
    page = Page(browser, llm_backend.url_for("/llmsim/ui"))
    yield page
    page.page.close()
    assert page.errors == [], "the page logged errors"


def here(url: str, root: str) -> bool:
    """Whether the page asked ``root``'s origin (a ``blob:`` URL it made from this origin's data counts)."""
    return url.removeprefix("blob:").startswith(root + "/")


def milliseconds(value: float) -> str:
    """As the page writes a latency under a second."""
    return f"{value * 1000:.1f} ms"


def test_the_page_shows_the_numbers_the_metrics_have(llm_backend: LLMBackend, browser: Any) -> None:
    from playwright.sync_api import expect

    llm_backend.configure(ttft=0.01, itl=0.002)
    with httpx.Client() as client:
        for _ in range(5):
            assert client.post(llm_backend.url_for("/v1/chat/completions"), json=CHAT).status_code == 200
        assert client.post(llm_backend.url_for("/v1/chat/completions"), json=CHAT,
                           headers={"x-llmsim-fault": "rate_limit"}).status_code == 429
    from websockets.sync.client import connect

    session = connect(llm_backend.url_for("/v1/realtime?model=m").replace("http", "ws", 1))  # one open session
    llm_backend.scenario(step(0, ttft=0.01), window(1e6, 2e6, rpm=1))  # one phase of two acting now
    snapshot = llm_backend.metrics
    page = Page(browser, llm_backend.url_for("/llmsim/ui"))
    expect(page.page.locator("#connection")).to_have_text("live")
    expect(page.page.locator("#requests-total")).to_have_text(str(snapshot.requests_total))
    expect(page.page.locator("#sessions")).to_have_text("1 / 1")
    expect(page.page.locator("#scenario")).to_have_text("1 / 2")
    assert "ttft=0.01" in (page.page.locator("#scenario").get_attribute("title") or "")
    session.close()
    assert snapshot.requests_total == 6
    assert page.text("#errors-total") == "1"
    assert page.text("#max-running") == str(snapshot.max_running)
    assert page.text("#ttft-p50") == milliseconds(snapshot.ttft.p50)
    assert page.text("#itl-p50") == milliseconds(snapshot.itl.p50)
    assert page.text("#e2e-p50") == milliseconds(snapshot.e2e.p50)
    expect(page.page.locator("#request-log tbody tr")).to_have_count(6)
    expect(page.page.locator("#ttft-histogram rect")).not_to_have_count(0)
    expect(page.page.locator("#timeline")).to_have_attribute("src", re.compile("^blob:"))  # the trace's SVG
    page.page.fill("#filter-status", "4xx")
    expect(page.page.locator("#request-log tbody tr")).to_have_count(1)
    assert "429" in page.text("#request-log tbody") and "rate_limit" in page.text("#request-log tbody")
    page.page.select_option("#filter-api", "openai.chat")
    page.page.fill("#filter-status", "")
    expect(page.page.locator("#request-log tbody tr")).to_have_count(6)
    # the page's own calls go to the control API: neither logged nor counted
    assert llm_backend.metrics.requests_total == 6 and len(llm_backend.requests) == 6
    assert page.requested and all(here(url, llm_backend.root_url) for url in page.requested)
    assert page.errors == []
    page.page.close()


def test_the_page_tells_the_truth_about_faults_and_history(llm_backend: LLMBackend, browser: Any) -> None:
    """A new user's view after traffic with faults, the page opened afterwards (defects issue, part 3)."""
    from playwright.sync_api import expect

    llm_backend.configure(speed=float("inf"))
    llm_backend.add_fault("server_error", times=2)
    llm_backend.add_fault("drop", after_tokens=3, header_only=True)
    llm_backend.add_fault("error_event", after_tokens=3, header_only=True)
    with httpx.Client() as client:
        statuses = [client.post(llm_backend.url_for("/v1/chat/completions"), json=CHAT).status_code
                    for _ in range(4)]
        for kind in ("drop", "error_event"):
            try:
                with client.stream("POST", llm_backend.url_for("/v1/chat/completions"), json={**CHAT, "stream": True},
                                   headers={"x-llmsim-fault": kind}) as stream:
                    for _ in stream.iter_lines():
                        pass
            except httpx.HTTPError:
                pass  # the drop ends the stream under the client
            # the client sees the drop's connection close before the server has logged the request: without
            # this wait the next one could end first (a suite run put "dropped" newest)
            assert llm_backend.wait_idle(timeout=30)
    assert statuses == [500, 500, 200, 200]
    state = llm_backend.fault_states[0]
    assert (state.fault.kind, state.hits, state.spent) == ("server_error", 2, True)
    page = Page(browser, llm_backend.url_for("/llmsim/ui"))
    expect(page.page.locator("#connection")).to_have_text("live")
    # the spent fault is listed as spent, with its hits
    first = page.page.locator("#faults tbody tr").first
    expect(first).to_contain_text("server_error")
    expect(first).to_contain_text("spent")
    assert first.locator("td").nth(2).inner_text() == "2"
    # how each request ended, and the faulted ones counted (two 500s, a drop, an error event)
    expect(page.page.locator("#request-log tbody tr")).to_have_count(6)
    ended = page.page.locator("#request-log tbody tr td:nth-child(14)").all_inner_texts()
    assert ended == ["error event", "dropped", "completed", "completed", "error", "error"]  # newest first
    assert page.text("#faulted-total") == "4"
    # the charts draw the traffic from before the page was opened (the backend kept it)
    expect(page.page.locator("#batch-chart polyline")).not_to_have_count(0)
    expect(page.page.locator("#rate-chart polyline")).to_have_count(1)
    history = httpx.get(llm_backend.url_for("/llmsim/v1/history")).json()
    assert history["samples"] and history["samples"][-1]["total"] == 6
    # the timeline's legend stays above the scrolling rows
    assert page.page.locator("#timeline-legend").is_visible()
    assert page.errors == []
    page.page.close()


def test_a_fault_armed_from_the_page_fails_the_next_request(llm_backend: LLMBackend, live: Page) -> None:
    from playwright.sync_api import expect

    live.page.select_option("#fault-kind", "server_error")
    live.page.fill("#fault-params input[data-param=times]", "1")
    live.page.fill("#fault-params input[data-param=message]", "armed from the page")
    live.page.click("#arm-fault")
    expect(live.page.locator("#action-status")).to_have_text("armed server_error")
    expect(live.page.locator("#faults tbody")).to_contain_text("times=1")
    assert [(f.kind, f.times) for f in llm_backend.faults] == [("server_error", 1)]
    failed = httpx.post(llm_backend.url_for("/v1/chat/completions"), json=CHAT)
    assert failed.status_code == 500 and failed.json()["error"]["message"] == "armed from the page"
    assert httpx.post(llm_backend.url_for("/v1/chat/completions"), json=CHAT).status_code == 200
    llm_backend.add_fault("rate_limit")
    live.page.click("#clear-faults")
    expect(live.page.locator("#action-status")).to_have_text("faults cleared")
    assert llm_backend.faults == []
    expect(live.page.locator("#faults tbody")).to_have_text(re.compile("none armed"))


def test_a_bad_fault_from_the_page_says_why(llm_backend: LLMBackend, live: Page) -> None:
    from playwright.sync_api import expect

    live.page.select_option("#fault-kind", "rate_limit")
    live.page.fill("#fault-params input[data-param=rate]", "7")
    live.page.click("#arm-fault")
    expect(live.page.locator("#action-status")).to_have_class("bad")
    assert "400" in live.text("#action-status") and "rate" in live.text("#action-status")
    assert llm_backend.faults == []
    live.errors.clear()  # the 400 itself is a console error; that is the point here


def test_settings_and_reset_from_the_page(llm_backend: LLMBackend, live: Page) -> None:
    from playwright.sync_api import expect

    expect(live.page.locator("#settings-form input[name=ttft]")).to_have_value("0")
    live.page.fill("#settings-form input[name=ttft]", "0.05")
    live.page.fill("#settings-form input[name=max_batch_size]", "3")
    live.page.click("#apply-settings")
    expect(live.page.locator("#action-status")).to_have_text("settings applied")
    assert llm_backend.config.ttft == 0.05 and llm_backend.config.max_batch_size == 3
    httpx.post(llm_backend.url_for("/v1/chat/completions"), json=CHAT)
    expect(live.page.locator("#requests-total")).to_have_text("1")
    live.page.click("#reset-backend")
    expect(live.page.locator("#action-status")).to_have_text("backend reset")
    assert llm_backend.config.ttft == 0.0 and llm_backend.requests == []
    expect(live.page.locator("#requests-total")).to_have_text("0")
    expect(live.page.locator("#settings-form input[name=ttft]")).to_have_value("0")


def test_the_control_token_comes_from_the_fragment_and_stays_here(browser: Any) -> None:
    from playwright.sync_api import expect

    with LLMBackend(control_token="s3cret") as backend:
        without = Page(browser, backend.url_for("/llmsim/ui"))
        expect(without.page.locator("#connection")).to_contain_text("401")
        assert "#token=" in without.text("#connection")
        without.page.close()

        page = Page(browser, backend.url_for("/llmsim/ui") + "#token=s3cret")
        sent: list[tuple[str, str | None]] = []
        page.page.on("request", lambda request: sent.append((request.url, request.headers.get("authorization"))))
        expect(page.page.locator("#connection")).to_have_text("live")
        assert "#token" not in page.page.url  # taken out of the address bar
        controls = [(url, auth) for url, auth in sent if "/llmsim/v1/" in url]
        assert controls and all(auth == "Bearer s3cret" for _, auth in controls)
        assert all(here(url, backend.root_url) for url, _ in sent)  # never another origin
        page.page.reload()  # kept for this tab
        expect(page.page.locator("#connection")).to_have_text("live")
        page.page.close()
        assert [error for error in without.errors if "401" not in error] == []


# --- without a browser: the files and the control calls the page uses ---


def test_the_page_files_are_served_with_a_strict_policy(llm_backend: LLMBackend) -> None:
    page = httpx.get(llm_backend.url_for("/llmsim/ui"))
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert "connect-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["x-content-type-options"] == "nosniff"
    for name, kind in (("app.js", "text/javascript"), ("app.css", "text/css"), ("favicon.svg", "image/svg+xml")):
        assert name in page.text or name == "favicon.svg"
        response = httpx.get(llm_backend.url_for(f"/llmsim/ui/{name}"))
        assert response.status_code == 200 and response.headers["content-type"].startswith(kind)
    assert "http" not in re.sub(r"http://www\.w3\.org/2000/svg", "", httpx.get(
        llm_backend.url_for("/llmsim/ui/app.js")).text)  # nothing fetched from elsewhere
    missing = httpx.get(llm_backend.url_for("/llmsim/ui/nothing.js"))
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "unknown_url"
    assert httpx.post(llm_backend.url_for("/llmsim/ui")).status_code == 405
    assert llm_backend.requests == [] and llm_backend.metrics.requests_total == 0  # not API traffic


def test_the_root_links_the_page_for_a_browser_only(llm_backend: LLMBackend) -> None:
    browser_like = httpx.get(llm_backend.url_for("/"), headers={"Accept": "text/html,*/*;q=0.8"})
    assert browser_like.status_code == 200 and 'href="/llmsim/ui"' in browser_like.text
    assert httpx.get(llm_backend.url_for("/")).status_code == 404  # a client's probe keeps the API's 404


def test_histograms_fault_kinds_and_log_filters(llm_backend: LLMBackend) -> None:
    base = llm_backend.url_for("/llmsim/v1")
    with httpx.Client() as client:
        for _ in range(3):
            client.post(llm_backend.url_for("/v1/chat/completions"), json=CHAT)
        client.post(llm_backend.url_for("/v1/messages"), json={**CHAT, "model": "claude"})
        client.post(llm_backend.url_for("/v1/chat/completions"), json=CHAT, headers={"x-llmsim-fault": "rate_limit"})
        histograms = client.get(base + "/histograms").json()
        assert histograms["ttft"]["count"] == 4 and len(histograms["ttft"]["counts"]) == \
            len(histograms["ttft"]["bounds"]) + 1
        assert histograms["itl"]["count"] == 4 * 19  # 20 tokens each, 19 gaps
        kinds = client.get(base + "/fault-kinds").json()
        assert "retry_after" in kinds["rate_limit"]["params"] and "times" in kinds["rate_limit"]["when"]
        assert kinds["rate_limit"]["types"]["retry_after"] == "number" and kinds["stall"]["types"]["times"] == \
            "integer" and kinds["rate_limit"]["types"]["message"] == "string"  # the page's form follows these
        assert client.get(base + "/requests", params={"api": "anthropic.messages"}).json()["total"] == 1
        assert client.get(base + "/requests", params={"status": "4xx"}).json()["records"][0]["status"] == 429
        assert client.get(base + "/requests", params={"status": "200", "model": "m"}).json()["total"] == 3
        tail = client.get(base + "/requests", params={"tail": 2}).json()
        assert tail["offset"] == 3 and [r["status"] for r in tail["records"]] == [200, 429]
        bad = client.get(base + "/requests", params={"status": "teapot"})
        assert bad.status_code == 400 and "status" in bad.json()["error"]["message"]
        assert client.get(base + "/requests", params={"offset": -1}).status_code == 400
    snapshot = httpx.get(base + "/metrics").json()
    assert snapshot["running"] == 0 and snapshot["waiting"] == 0 and snapshot["requests_total"] == 5
