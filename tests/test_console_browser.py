"""The web console in a real browser: headless Chromium (the system's, driven by Playwright) against a real
`lightmem serve` on 127.0.0.1. Each view is saved as a screenshot under $LIGHTMEM_CONSOLE_SCREENSHOTS (default:
a folder of pytest's temporary directory).

Skipped, saying why, where Playwright or a Chromium binary is missing; `make test` installs both.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import httpx
import pytest

from lightmem.server import launch

try:
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import sync_playwright
except ImportError:  # pragma: no cover - the dev extra has it
    sync_playwright = None

ALICE, BOB, ADMIN = "alice-key-0000000001", "bob-key-00000000002", "admin-key-0000000003"
KEYS = {ALICE: ["alice"], BOB: ["bob"], ADMIN: ["*"]}
XSS = ('<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2; alert(2)">'
       '"><svg onload="window.__pwned = 3">')
ALICE_SAYS = [
    ("2023-05-08", "s1", ["I adopted a dog named Rex last week", "My sister Maria lives in Lisbon",
                          "I work as a nurse at the city hospital"]),
    ("2023-06-12", "s2", ["Rex learned to fetch the ball in the park", "I started learning the cello in June",
                          "We are planning a trip to Porto in August"]),
    ("2023-07-03", "s3", [XSS, "My favourite food is grilled sardines"]),
]
BOB_SAYS = [("2023-05-09", "b1", ["Bob's secret: the vault code is 4512"])]


def chromium() -> str | None:
    """The Chromium binary: $LIGHTMEM_CHROMIUM, else the first of the usual names on the PATH."""
    given = os.environ.get("LIGHTMEM_CHROMIUM")
    if given:
        return given
    return next((p for n in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
                 if (p := shutil.which(n))), None)


pytestmark = pytest.mark.multiprocess  # a lightmem serve and a browser

if sync_playwright is None:
    pytest.skip("playwright is not installed (pip install -e '.[dev]', or `make test`)", allow_module_level=True)
if chromium() is None:
    pytest.skip("no Chromium binary found (apt-get install chromium, or set LIGHTMEM_CHROMIUM; `make test` installs it)",
                allow_module_level=True)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A real `lightmem serve` (hashing embedder, the trained ranker) with alice's and bob's memories."""
    tmp = tmp_path_factory.mktemp("console-server")
    keys = tmp / "keys.json"
    keys.write_text(json.dumps(KEYS))
    proc, base = launch.start(tmp / "store", keys, tmp / "server.log",
                              ["--workers", "1", "--encoder", "hashing", "--selector", "trained"])
    try:
        for user, key, says in [("alice", ALICE, ALICE_SAYS), ("bob", BOB, BOB_SAYS)]:
            for day, session_id, texts in says:
                r = httpx.post(f"{base}/v1/memories", headers={"Authorization": f"Bearer {key}"}, timeout=60, json={
                    "user_id": user, "session_id": session_id,
                    "messages": [{"speaker": user.title(), "text": t, "timestamp": day} for t in texts]})
                assert r.status_code == 201, r.text
        yield base
    finally:
        launch.stop(proc)


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as p:
        # As root (a CI container) Chromium runs only without its sandbox; a small /dev/shm would crash its renderer.
        args = ["--disable-dev-shm-usage", *(["--no-sandbox"] if hasattr(os, "geteuid") and os.geteuid() == 0 else [])]
        b = p.chromium.launch(executable_path=chromium(), args=args)
        yield b
        b.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    folder = Path(os.environ.get("LIGHTMEM_CONSOLE_SCREENSHOTS") or tmp_path_factory.mktemp("console-screenshots"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
def page(browser):
    """A fresh browser session (no cookie) whose page records dialogs and script errors."""
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    pg = context.new_page()
    pg.dialogs = []
    pg.on("dialog", lambda d: (pg.dialogs.append(d.message), d.dismiss()))
    yield pg
    context.close()


def snap(page, path: Path, **kw) -> None:
    """A screenshot of the loaded page (an artifact, not an assertion). Chromium under a loaded machine sometimes
    answers "Unable to capture screenshot" for a page that has just loaded: it is taken again once, after a pause."""
    page.wait_for_load_state("load")
    try:
        page.screenshot(path=path, **kw)
    except PlaywrightError:
        page.wait_for_timeout(500)
        page.screenshot(path=path, **kw)


def api(base: str, key: str, method: str, path: str, **kw) -> httpx.Response:
    return httpx.request(method, f"{base}{path}", headers={"Authorization": f"Bearer {key}"}, timeout=60, **kw)


def memory_id(base: str, user: str, key: str, text: str) -> str:
    got = api(base, key, "GET", "/v1/memories", params={"user_id": user, "include_archived": True}).json()["items"]
    return next(m["id"] for m in got if m["text"].endswith(text))


def sign_in(page, base: str, key: str) -> None:
    page.goto(f"{base}/ui")
    assert "/ui/login" in page.url
    page.fill("input[name=key]", key)
    page.click("#sign-in")
    page.wait_for_load_state()


def test_sign_in_list_search_and_open_a_memory(server, page, shots):
    page.goto(f"{server}/ui/login")
    snap(page, path=shots / "login.png")
    sign_in(page, server, ALICE)
    assert "/ui/memories" in page.url and page.inner_text("#current-user") == "alice"
    assert page.inner_text("#total") == "8"
    snap(page, path=shots / "memories.png", full_page=True)
    page.fill("input[name=q]", "lisbon")
    page.click("#apply")
    links = page.locator("a.memory")
    assert links.count() == 1 and links.first.inner_text() == "Alice: My sister Maria lives in Lisbon"
    links.first.click()
    assert page.inner_text("#memory-text") == "Alice: My sister Maria lives in Lisbon"
    assert "Alice: My sister Maria lives in Lisbon" in page.inner_text("#provenance")  # the turn it was written from
    assert "ADD" in page.inner_text("#history")
    snap(page, path=shots / "memory.png", full_page=True)
    page.goto(f"{server}/ui/memories")  # the cookie lasts the browser session: no second sign-in
    assert "/ui/memories" in page.url and page.inner_text("#total") == "8"


def test_the_inspector_shows_the_packed_memory_in_the_prompt(server, page, shots):
    sign_in(page, server, ALICE)
    page.click("text=Context inspector")
    page.fill("#question", "What is the name of my dog?")
    page.click("#run")
    prompt = page.inner_text("#prompt")
    assert prompt.rstrip().endswith("What is the name of my dog?")
    rex = memory_id(server, "alice", ALICE, "I adopted a dog named Rex last week")
    row = page.locator(f'#candidates tr[data-id="{rex}"]')
    assert row.get_attribute("class") == "packed" and "above the budget" in row.inner_text()
    assert "Alice: I adopted a dog named Rex last week" in prompt
    assert int(page.inner_text("#tokens")) <= int(page.inner_text("#budget"))
    assert page.locator("#times th").count() >= 4  # time per stage
    assert page.inner_text("#budget") == page.inner_text("#default-budget")  # the memory's own default budget
    ranks = [int(t) for t in page.locator("#candidates td.ranker-rank").all_inner_texts()]
    assert ranks == list(range(1, len(ranks) + 1))  # the order packing walks
    snap(page, path=shots / "context.png", full_page=True)
    page.click("#sort-stage1")
    assert page.get_attribute("#candidates", "data-sort") == "stage1"
    stage1 = [int(t) for t in page.locator("#candidates td.stage1-rank").all_inner_texts()]
    assert stage1 == list(range(1, len(stage1) + 1)) and page.input_value("#question") == "What is the name of my dog?"
    page.click("#sort-ranker")
    assert page.get_attribute("#candidates", "data-sort") == "ranker"
    page.click(f'#candidates tr[data-id="{rex}"] a')  # packed a moment ago: counted as retrieved already
    assert page.inner_text("#retrieved").split(" time")[0].isdigit()
    page.go_back()
    page.fill("input[name=budget]", "100")  # room for a few memories: the others fall below the edge
    page.click("#run")
    assert page.locator("#candidates tr.packed").count() >= 1 and page.locator("#candidates tr.cut").count() >= 1
    assert int(page.inner_text("#tokens")) <= 100
    snap(page, path=shots / "context-budget.png", full_page=True)


def test_a_mistyped_filter_keeps_the_page_and_says_why(server, page, shots):
    sign_in(page, server, ALICE)
    page.fill("input[name=q]", "Rex")
    page.fill("input[name=meta]", '{"topic": sport}')
    page.click("#apply")
    assert "not JSON" in page.inner_text("#error") and page.inner_text("h1") == "Memories of alice"
    assert page.input_value("input[name=meta]") == '{"topic": sport}' and page.input_value("input[name=q]") == "Rex"
    snap(page, path=shots / "memories-error.png", full_page=True)
    page.fill("input[name=meta]", "")
    page.click("#apply")
    assert page.locator("#error").count() == 0 and page.inner_text("#total") == "2"
    assert "memories match" in page.inner_text("#matches")
    page.click("text=Context inspector")  # the navigation stays
    page.fill("#question", "my dog")
    page.fill("input[name=budget]", "many")
    page.click("#run")
    assert "whole number" in page.inner_text("#error") and page.input_value("#question") == "my dog"
    assert page.locator("header nav a").count() == 4


def test_delete_a_memory_and_it_is_gone_from_the_api(server, page, shots):
    sign_in(page, server, ALICE)
    food = memory_id(server, "alice", ALICE, "My favourite food is grilled sardines")
    page.goto(f"{server}/ui/memory?user=alice&id={food}")
    page.click("#delete")
    snap(page, path=shots / "delete.png")
    page.check("#confirm")
    page.click("#do-delete")
    assert food in page.inner_text("#notice")
    assert api(server, ALICE, "GET", f"/v1/memories/{food}", params={"user_id": "alice"}).status_code == 404
    assert "sardines" not in page.inner_text("#memories")


def test_an_admin_key_switches_users(server, page, shots):
    sign_in(page, server, ADMIN)
    assert page.url.endswith("/ui/users")
    users = page.inner_text("#users")
    assert "alice" in users and "bob" in users
    snap(page, path=shots / "users.png")
    page.click("#users >> text=bob")
    assert page.inner_text("#current-user") == "bob" and "vault code is 4512" in page.inner_text("#memories")
    page.fill("header input[name=user]", "alice")
    page.click("header form.switch button")
    assert page.inner_text("#current-user") == "alice" and "Lisbon" in page.inner_text("#memories")
    page.click("text=Status")
    assert "backlog" in page.inner_text("#index") and "bob" in page.inner_text("#user-counts")
    snap(page, path=shots / "status.png", full_page=True)


def test_a_user_key_cannot_see_another_users_memories_by_any_url(server, page):
    sign_in(page, server, ALICE)
    vault = memory_id(server, "bob", BOB, "Bob's secret: the vault code is 4512")
    for path in ("/ui/memories?user=bob", "/ui/memories?user=bob&q=vault", f"/ui/memory?user=bob&id={vault}",
                 f"/ui/memory?user=alice&id={vault}", f"/ui/memory/delete?user=bob&id={vault}",
                 "/ui/context?user=bob&q=vault+code", "/ui/context?user=alice&q=vault+code", "/ui/users", "/ui/status"):
        response = page.goto(f"{server}{path}")
        assert "4512" not in page.content(), path
        if "user=bob" in path:
            assert response.status == 403, path
    token = page.locator("input[name=csrf]").first.get_attribute("value")
    for user in ("bob", "alice"):  # the form's fields edited by hand: still nothing of bob's moves
        r = page.request.post(f"{server}/ui/memory/delete?user={user}&id={vault}", form={"csrf": token, "confirm": "yes"},
                              headers={"Origin": server}, max_redirects=0)
        assert r.status in (403, 404), user
    assert api(server, BOB, "GET", f"/v1/memories/{vault}", params={"user_id": "bob"}).status_code == 200


def test_a_stored_xss_payload_stays_inert(server, page):
    sign_in(page, server, ALICE)
    xss = memory_id(server, "alice", ALICE, XSS)
    for path in ("/ui/memories?user=alice", f"/ui/memory?user=alice&id={xss}", "/ui/context?user=alice&q=pwned+svg+img",
                 f"/ui/memory/delete?user=alice&id={xss}"):
        page.goto(f"{server}{path}")
        page.wait_for_timeout(200)  # an onerror would fire once the broken image fails
        assert page.evaluate("typeof window.__pwned") == "undefined", path
        assert page.dialogs == [], path
        assert page.locator("main script, main img, main svg").count() == 0, path
        assert '<script>window.__pwned = 1</script>' in page.inner_text("main"), path  # shown as text


def test_a_bearer_header_reads_every_page_without_signing_in(server, browser):
    context = browser.new_context(extra_http_headers={"Authorization": f"Bearer {ALICE}"})
    try:
        pg = context.new_page()
        response = pg.goto(f"{server}/ui/memories?user=alice")
        assert response.status == 200 and pg.inner_text("#current-user") == "alice"
        assert "script-src 'none'" in response.headers["content-security-policy"]
    finally:
        context.close()


@pytest.mark.parametrize("width", [390, 1280])
def test_every_page_fits_the_window(server, browser, shots, width):
    """No page is wider than a phone's window or a laptop's: wide tables scroll inside their own box."""
    context = browser.new_context(viewport={"width": width, "height": 844})
    try:
        pg = context.new_page()
        pg.goto(f"{server}/ui/login")
        pages = [("login", "/ui/login")]
        sign_in(pg, server, ADMIN)
        rex = memory_id(server, "alice", ALICE, "I adopted a dog named Rex last week")
        pages += [("users", "/ui/users"), ("memories", "/ui/memories?user=alice"),
                  ("memories-error", "/ui/memories?user=alice&meta=%7Bnot+json&from=yesterday-ish"),
                  ("memory", f"/ui/memory?user=alice&id={rex}"), ("delete", f"/ui/memory/delete?user=alice&id={rex}"),
                  ("context-empty", "/ui/context?user=alice"),
                  ("context", "/ui/context?user=alice&q=What+is+the+name+of+my+dog%3F&budget=60"),
                  ("context-error", "/ui/context?user=alice&q=dog&budget=lots"), ("status", "/ui/status"),
                  ("not-found", "/ui/memory?user=alice&id=no-such-memory")]
        for name, path in pages:
            pg.goto(f"{server}{path}")
            scroll, window = pg.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
            snap(pg, path=shots / f"{name}-{width}.png", full_page=True)
            assert scroll <= window, (name, scroll, window)
    finally:
        context.close()
