"""The web console's rules without a browser: sign-in cookies, CSRF tokens, the security headers, tenancy by URL
and form field, escaping, the list's filters and the inspector's table (tests/test_console_browser.py drives it
in Chromium)."""
from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from lightmem.memory import Memory
from lightmem.models.embedder import HashingEmbedder
from lightmem.retrieval.stage2 import default_selector
from lightmem.server import KeyRing, create_app
from lightmem.server.console import session

ALICE, BOB, ADMIN = "alice-key-0000000001", "bob-key-00000000002", "admin-key-0000000003"
KEYS = {ALICE: ["alice"], BOB: ["bob"], ADMIN: ["*"]}
XSS = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">'


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def client(tmp_path):
    def factory() -> Memory:
        return Memory.open(tmp_path / "store", embedder=HashingEmbedder(64), selector=default_selector(),
                           synchronous="NORMAL")

    with TestClient(create_app(factory, KeyRing(KEYS))) as c:
        for user, key, texts, session_id in [
            ("alice", ALICE, ["I adopted a dog named Rex", "My sister lives in Lisbon"], "s1"),
            ("alice", ALICE, ["I started learning the cello", XSS], "s2"),
            ("bob", BOB, ["Bob's secret: the vault code is 4512"], "b1"),
        ]:
            r = c.post("/v1/memories", headers=auth(key), json={
                "user_id": user, "session_id": session_id,
                "messages": [{"speaker": user.title(), "text": t, "timestamp": "2023-05-08" if session_id == "s1" else
                              "2023-07-01"} for t in texts]})
            assert r.status_code == 201, r.text
        yield c


def items(c: TestClient, user: str, key: str) -> dict[str, str]:
    """Text -> id of the user's memories, read through the API."""
    got = c.get("/v1/memories", params={"user_id": user, "include_archived": True}, headers=auth(key)).json()["items"]
    return {m["text"].split(": ", 1)[1]: m["id"] for m in got}


def sign_in(c: TestClient, key: str) -> str:
    """Sign in through the form; returns the CSRF token the pages carry."""
    r = c.post("/ui/login", data={"key": key, "next": "/ui/users"}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/ui/users"
    page = c.get("/ui/users").text
    return re.search(r'name="csrf" value="([^"]+)"', page).group(1)


def test_pages_need_a_key_and_a_bearer_header_is_one(client):
    r = client.get("/ui/memories?user=alice", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].startswith("/ui/login?next=")
    assert client.get("/ui/memories?user=alice", headers=auth("not-a-key-at-all-000")).status_code == 401
    r = client.get("/ui/memories?user=alice", headers=auth(ALICE))
    assert r.status_code == 200 and "Lisbon" in r.text


def test_the_cookie_is_http_only_strict_and_holds_no_key(client):
    r = client.post("/ui/login", data={"key": ALICE}, follow_redirects=False)
    cookie = r.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict") and "Path=/ui" in cookie
    assert ALICE not in cookie and "Max-Age" not in cookie  # ends with the browser session
    assert client.get("/ui/memories").status_code == 200  # one key of one user: no need to name it


def test_a_wrong_key_or_a_forged_cookie_signs_nobody_in(client):
    assert client.post("/ui/login", data={"key": "wrong-key-000000000000"}).status_code == 401
    client.post("/ui/login", data={"key": ALICE})
    value = client.cookies[session.COOKIE]
    body, _, mac = value.partition(".")
    forged = session._b64(session._unb64(body).replace(b'"key #1"', b'"key #3"'))  # the admin key's label
    client.cookies.clear()
    client.cookies.set(session.COOKIE, f"{forged}.{mac}")
    r = client.get("/ui/memories?user=bob", follow_redirects=False)
    assert r.status_code == 303 and "/ui/login" in r.headers["location"]


def test_every_page_sends_a_csp_without_inline_scripts(client):
    for path in ("/ui/users", "/ui/memories?user=alice", "/ui/context?user=alice&q=dog", "/ui/status", "/ui/login"):
        r = client.get(path, headers=auth(ALICE))
        csp = r.headers["content-security-policy"]
        assert "script-src 'none'" in csp and "unsafe-inline" not in csp and "frame-ancestors 'none'" in csp, path
        assert r.headers["x-content-type-options"] == "nosniff" and r.headers["cache-control"] == "no-store"
        assert re.fullmatch(r"app;dur=[0-9.]+", r.headers["server-timing"])


def test_memory_text_is_escaped_everywhere(client):
    xss_id = items(client, "alice", ALICE)[XSS]
    for path in ("/ui/memories?user=alice", f"/ui/memory?user=alice&id={xss_id}", "/ui/context?user=alice&q=pwned",
                 f"/ui/memory/delete?user=alice&id={xss_id}"):
        page = client.get(path, headers=auth(ALICE)).text
        assert "<script>window" not in page and "<img src=x" not in page, path
        assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in page, path


def test_a_form_without_the_session_token_changes_nothing(client):
    token = sign_in(client, ALICE)
    rex = items(client, "alice", ALICE)["I adopted a dog named Rex"]
    url = f"/ui/memory/delete?user=alice&id={rex}"
    assert client.post(url, data={"confirm": "yes"}).status_code == 403
    assert client.post(url, data={"confirm": "yes", "csrf": "x" * 43}).status_code == 403
    other = client.post(url, data={"confirm": "yes", "csrf": token}, headers={"Origin": "https://evil.example"})
    assert other.status_code == 403
    assert client.post(url, data={"csrf": token}).status_code == 422  # no confirmation
    assert "I adopted a dog named Rex" in items(client, "alice", ALICE)
    r = client.post(url, data={"confirm": "yes", "csrf": token}, follow_redirects=False)
    assert r.status_code == 303
    assert client.get(f"/v1/memories/{rex}", params={"user_id": "alice"}, headers=auth(ALICE)).status_code == 404


def test_edit_archive_and_restore_go_through_memory(client):
    token = sign_in(client, ALICE)
    cello = items(client, "alice", ALICE)["I started learning the cello"]
    q = f"user=alice&id={cello}"
    client.post(f"/ui/memory/edit?{q}", data={"csrf": token, "text": "Alice: I play the cello", "keep_history": "1"})
    got = client.get(f"/v1/memories/{cello}", params={"user_id": "alice"}, headers=auth(ALICE)).json()
    assert got["text"] == "Alice: I play the cello"
    client.post(f"/ui/memory/archive?{q}", data={"csrf": token})
    assert client.get(f"/v1/memories/{cello}", params={"user_id": "alice"}, headers=auth(ALICE)).json()["archived"]
    page = client.get(f"/ui/memory?{q}").text
    assert 'id="restore"' in page and "I started learning the cello" in page  # kept in the history
    client.post(f"/ui/memory/restore?{q}", data={"csrf": token})
    assert not client.get(f"/v1/memories/{cello}", params={"user_id": "alice"}, headers=auth(ALICE)).json()["archived"]
    events = client.get(f"/v1/memories/{cello}/history", params={"user_id": "alice"}, headers=auth(ALICE)).json()["events"]
    assert len(events) >= 4


def test_no_url_or_form_field_reaches_another_users_memories(client):
    token = sign_in(client, ALICE)
    vault = items(client, "bob", BOB)["Bob's secret: the vault code is 4512"]
    for path in ("/ui/memories?user=bob", f"/ui/memory?user=bob&id={vault}", "/ui/context?user=bob&q=vault+code",
                 f"/ui/memory/delete?user=bob&id={vault}", "/ui/memories?user=bob&q=vault"):
        r = client.get(path)
        assert r.status_code == 403 and "4512" not in r.text, path
    r = client.get(f"/ui/memory?user=alice&id={vault}")  # bob's id under alice's name: as if it did not exist
    assert r.status_code == 404 and "4512" not in r.text
    assert "4512" not in client.get("/ui/context?user=alice&q=vault+code").text
    for action in ("delete", "archive", "edit"):
        for user in ("bob", "alice"):
            r = client.post(f"/ui/memory/{action}?user={user}&id={vault}", data={"csrf": token, "confirm": "yes", "text": "x"})
            assert r.status_code in (403, 404), (action, user)
    assert "Bob's secret: the vault code is 4512" in items(client, "bob", BOB)
    users = client.get("/ui/users").text
    assert ">bob<" not in users and ">alice<" in users


def test_an_admin_key_chooses_any_user(client):
    page = client.get("/ui/users", headers=auth(ADMIN)).text
    assert ">alice<" in page and ">bob<" in page
    assert "4512" in client.get("/ui/memories?user=bob", headers=auth(ADMIN)).text
    assert client.get("/ui/memories", headers=auth(ADMIN)).status_code == 422  # which user: it must say


def test_the_list_filters_and_pages(client):
    def texts(**params) -> list[str]:
        page = client.get("/ui/memories", params={"user": "alice", **params}, headers=auth(ALICE)).text
        return re.findall(r'class="memory"[^>]*>Alice: ([^<]*)<', page)

    assert texts() == ["&lt;script&gt;window.__pwned=1&lt;/script&gt;&lt;img src=x onerror=&#34;window.__pwned=2&#34;&gt;",
                       "I started learning the cello", "My sister lives in Lisbon", "I adopted a dog named Rex"]
    assert texts(q="LISBON") == ["My sister lives in Lisbon"]
    assert texts(session="s1") == ["My sister lives in Lisbon", "I adopted a dog named Rex"]
    assert texts(**{"from": "2023-06-01"})[1:] == ["I started learning the cello"]
    assert texts(to="2023-05-08") == ["My sister lives in Lisbon", "I adopted a dog named Rex"]
    assert texts(meta='{"session_id": {"$ne": "s1"}}')[1:] == ["I started learning the cello"]
    r = client.get("/ui/memories", params={"user": "alice", "meta": "{not json"}, headers=auth(ALICE))
    assert r.status_code == 422 and "not JSON" in r.text
    assert re.search(r'<span id="total">2</span>\s*memories match', client.get(
        "/ui/memories", params={"user": "alice", "session": "s1"}, headers=auth(ALICE)).text)
    rex = items(client, "alice", ALICE)["I adopted a dog named Rex"]
    client.post(f"/v1/memories/{rex}/archive", params={"user_id": "alice"}, headers=auth(ALICE))
    assert "I adopted a dog named Rex" not in texts() and "I adopted a dog named Rex" in texts(archived="1")


def test_the_list_pages_newest_first(client, monkeypatch):
    from lightmem.server.console import views

    monkeypatch.setattr(views, "PAGE_SIZE", 3)
    first = client.get("/ui/memories?user=alice", headers=auth(ALICE)).text
    second = client.get("/ui/memories?user=alice&page=1", headers=auth(ALICE)).text
    assert "page 1 of 2" in first and 'rel="next"' in first and "I adopted a dog named Rex" not in first
    assert "I adopted a dog named Rex" in second and 'rel="prev"' in second
    assert re.search(r'<span id="total">4</span>\s*memories match', first)


def test_the_list_says_its_order_shows_the_time_it_orders_by_and_counts_the_matches(client, monkeypatch):
    """The list is in write order, latest first: it says so and shows each memory's write time (its event time
    beside it). Filtered, it still counts what matches: exactly on its last page, up to a cap before it."""
    from lightmem.server.console import views

    r = client.post("/v1/memories", headers=auth(ALICE), json={"user_id": "alice", "session_id": "s0", "messages": [
        {"speaker": "Alice", "text": "Back in 2019 I ran my first marathon", "timestamp": "2019-04-01"}]})
    assert r.status_code == 201
    page = client.get("/ui/memories?user=alice", headers=auth(ALICE)).text
    assert "the latest written first" in page and "newest first" not in page
    assert re.search(r'<span id="total">5</span>\s*memories match', page)
    rows = re.findall(r'<td class="when written">([^<]*)</td>\s*<td class="when">([^<]*)</td>\s*'
                      r'<td class="text"><a class="memory"[^>]*>Alice: ([^<]*)<', page)
    assert rows[0][2] == "Back in 2019 I ran my first marathon" and rows[0][1].startswith("2019-04-01")
    written = [w for w, _, _ in rows]
    assert written == sorted(written, reverse=True) and not written[0].startswith("2019")  # ordered by the time shown
    monkeypatch.setattr(views, "PAGE_SIZE", 2)
    filtered = {"user": "alice", "from": "2019-01-01"}
    first = client.get("/ui/memories", params=filtered, headers=auth(ALICE)).text
    assert re.search(r'<span id="total">5</span>\s*memories match', first) and "page 1 of 3" in first
    last = client.get("/ui/memories", params={**filtered, "page": "2"}, headers=auth(ALICE)).text
    assert re.search(r'<span id="total">5</span>\s*memories match', last)
    one = client.get("/ui/memories", params={**filtered, "q": "marathon"}, headers=auth(ALICE)).text
    assert re.search(r'<span id="total">1</span>\s*memory matches', one)
    monkeypatch.setattr(views, "COUNT_CAP", 3)
    capped = client.get("/ui/memories", params=filtered, headers=auth(ALICE)).text
    assert re.search(r'<span id="total">3</span>\+\s*memories match', capped) and 'rel="next"' in capped


def test_a_mistyped_filter_is_said_on_the_list_page_with_the_form_as_typed(client):
    r = client.get("/ui/memories", params={"user": "alice", "q": "dog", "meta": "{not json", "from": "yesterday-ish",
                                           "to": "2023-06-01"}, headers=auth(ALICE))
    assert r.status_code == 422
    page = r.text
    assert 'id="filters"' in page and 'id="error"' in page and "<h1>Memories of alice</h1>" in page
    assert 'value="{not json"' in page and 'value="yesterday-ish"' in page and 'value="dog"' in page
    assert 'value="2023-06-01"' in page
    assert "not JSON" in page and "yesterday-ish" in page.split('id="error"')[1]  # both mistakes named
    assert page.count('aria-invalid="true"') == 2
    assert 'href="/ui/memories?user=alice"' in page and 'href="/ui/context?user=alice"' in page  # the navigation


def test_a_mistyped_budget_is_said_on_the_inspector_with_the_form_as_typed(client):
    for budget in ("lots", "0", "-5"):
        r = client.get("/ui/context", params={"user": "alice", "q": "what is my dog called", "budget": budget,
                                              "stm": "Alice: hi"}, headers=auth(ALICE))
        assert r.status_code == 422, budget
        page = r.text
        assert 'id="inspect"' in page and 'id="error"' in page and "budget" in page.split('id="error"')[1]
        assert 'value="what is my dog called"' in page and f'value="{budget}"' in page and ">Alice: hi</textarea>" in page
        assert 'href="/ui/context?user=alice"' in page and 'id="prompt"' not in page
    r = client.get("/ui/context", params={"user": "alice", "q": "dog", "sort": "size"}, headers=auth(ALICE))
    assert r.status_code == 422 and "sort" in r.text and 'id="inspect"' in r.text


def test_a_refused_change_is_said_on_the_page_it_came_from(client):
    token = sign_in(client, ALICE)
    rex = items(client, "alice", ALICE)["I adopted a dog named Rex"]
    r = client.post(f"/ui/memory/edit?user=alice&id={rex}", data={"csrf": token, "text": "   ", "keep_history": "1"})
    assert r.status_code == 422 and 'id="edit"' in r.text and "non-empty" in r.text
    assert 'id="memory-text">Alice: I adopted a dog named Rex<' in r.text  # unchanged, and shown
    assert '<textarea name="text" rows="4" required>   </textarea>' in r.text and 'value="1" checked' in r.text
    assert 'href="/ui/memories?user=alice"' in r.text
    r = client.post(f"/ui/memory/delete?user=alice&id={rex}", data={"csrf": token})
    assert r.status_code == 422 and 'id="confirm-delete"' in r.text and "confirmation" in r.text
    assert "I adopted a dog named Rex" in items(client, "alice", ALICE)
    missing = client.get("/ui/memory?user=alice&id=no-such-memory")  # an error page keeps the user's links
    assert missing.status_code == 404 and 'href="/ui/context?user=alice"' in missing.text


def test_a_memory_packed_into_a_context_shows_as_retrieved_at_once(client):
    rex = items(client, "alice", ALICE)["I adopted a dog named Rex"]
    before = client.get(f"/ui/memory?user=alice&id={rex}", headers=auth(ALICE)).text
    assert re.search(r'id="retrieved">never<', before)
    page = client.get("/ui/context", params={"user": "alice", "q": "what is my dog called"}, headers=auth(ALICE)).text
    assert re.search(rf'<tr class="packed" data-id="{rex}">', page)
    after = client.get(f"/ui/memory?user=alice&id={rex}", headers=auth(ALICE)).text
    assert re.search(r'id="retrieved">1 time, last \d{4}-', after)
    client.get("/ui/context", params={"user": "alice", "q": "what is my dog called"}, headers=auth(ALICE))
    assert 'id="retrieved">2 times' in client.get(f"/ui/memory?user=alice&id={rex}", headers=auth(ALICE)).text


def test_the_inspector_shows_the_prompt_and_why_each_candidate_is_packed_or_not(client):
    page = client.get("/ui/context", params={"user": "alice", "q": "what is my dog called"}, headers=auth(ALICE)).text
    prompt = re.search(r'<pre id="prompt">(.*?)</pre>', page, re.S).group(1)
    assert "I adopted a dog named Rex" in prompt and prompt.rstrip().endswith("what is my dog called")
    rows = re.findall(r'<tr class="(packed|cut)" data-id="([^"]+)">', page)
    assert rows and rows[0][0] == "packed"
    for stage in ("embed", "stage1", "stage2", "compose"):
        assert f'<th class="n">{stage}</th>' in page
    # A budget with room for the question and about one memory: the rest is cut, and the table says why.
    small = client.get("/ui/context", params={"user": "alice", "q": "what is my dog called", "budget": "40"},
                       headers=auth(ALICE)).text
    assert "below the budget&#39;s edge" in small or "skipped: too long" in small
    tokens, budget = (int(re.search(rf'id="{n}">(\d+)<', small).group(1)) for n in ("tokens", "budget"))
    assert tokens <= budget == 40


def test_the_inspector_defaults_to_the_memorys_budget(client):
    from lightmem.retrieval.composer import DEFAULT_BUDGET

    memory = client.app.state.memory
    assert memory.composer.budget == DEFAULT_BUDGET
    page = client.get("/ui/context", params={"user": "alice", "q": "what is my dog called"}, headers=auth(ALICE)).text
    assert f'id="budget">{DEFAULT_BUDGET}<' in page and f'id="default-budget">{DEFAULT_BUDGET}<' in page
    assert f'placeholder="{DEFAULT_BUDGET}"' in page
    memory.composer.budget = 321  # what Memory.open(budget=321) sets
    page = client.get("/ui/context", params={"user": "alice", "q": "what is my dog called"}, headers=auth(ALICE)).text
    assert 'id="budget">321<' in page and 'id="default-budget">321<' in page


def test_the_candidates_are_in_the_rankers_order_and_sort_by_either_rank(client):
    params = {"user": "alice", "q": "what is my dog called"}
    page = client.get("/ui/context", params=params, headers=auth(ALICE)).text
    ranks = [(int(a), int(b)) for a, b in re.findall(r'ranker-rank">(\d+)</td><td class="n stage1-rank">(\d+)<', page)]
    assert len(ranks) >= 3 and [r for r, _ in ranks] == list(range(1, len(ranks) + 1))
    assert 'aria-sort="ascending"><a class="sort" id="sort-ranker"' in page
    link = re.search(r'id="sort-stage1" href="([^"]+)"', page).group(1).replace("&amp;", "&")
    assert "sort=stage1" in link and "q=what" in link
    by_stage1 = client.get(link, headers=auth(ALICE)).text
    again = [(int(a), int(b)) for a, b in re.findall(r'ranker-rank">(\d+)</td><td class="n stage1-rank">(\d+)<', by_stage1)]
    assert [s for _, s in again] == list(range(1, len(again) + 1)) and sorted(again) == sorted(ranks)
    assert 'name="sort" value="stage1"' in by_stage1  # inspecting again keeps the order


def test_a_memory_packed_only_into_leftover_space_is_told_from_the_top_hits():
    """Packing walks the ranker's order: the top hit is above the budget's edge; a long one that does not fit the tokens
    left is skipped; a shorter one after it that fits fills the leftover space; what follows the last packed is below."""
    from types import SimpleNamespace

    from lightmem.retrieval.composer import pack_by_budget
    from lightmem.retrieval.engine import RetrievalResult
    from lightmem.server.console import views
    from lightmem.types import ComposedContext, Hit, MemoryItem

    tokens = {"top": 5, "long": 50, "short": 5, "long2": 50, "short2": 4, "last": 9}  # in the ranker's order
    ranker = dict(zip(tokens, [0.9, 0.8, 0.7, 0.6, 0.5, 0.4]))
    stage1 = dict(zip(tokens, [0.1, 0.6, 0.5, 0.4, 0.3, 0.2]))  # Stage 1 ranks "top" last
    item = {n: MemoryItem(id=n, user_id="u", text=n, provenance=[], created_at=0, event_time=0, last_access=0,
                          n_tokens=c) for n, c in tokens.items()}
    cands = [Hit(item[n], {"ranker": ranker[n], "stage1": stage1[n]}, stage1[n]) for n in sorted(tokens, key=lambda n: -stage1[n])]
    kept = [list(tokens)[i] for i in pack_by_budget(list(tokens.values()), 16)]
    assert kept == ["top", "short", "short2"]
    context = ComposedContext("prompt", 16, 16, tuple(item[n] for n in kept), 0, 0)
    memory = SimpleNamespace(composer=SimpleNamespace(line_cost=lambda m: m.n_tokens))
    rows = views.candidate_rows(memory, context, RetrievalResult(kept, cands))
    assert [r.item.id for r in rows] == list(tokens) and [r.ranker_rank for r in rows] == [1, 2, 3, 4, 5, 6]
    why = {r.item.id: r.why for r in rows}
    assert why == {"top": views.TOP, "long": views.SKIPPED, "short": views.FILLED, "long2": views.SKIPPED,
                   "short2": views.FILLED, "last": views.BELOW}
    assert "leftover" in views.FILLED and "edge" not in views.FILLED
    assert {r.item.id: r.packed for r in rows if r.packed} == {"top": "whole", "short": "whole", "short2": "whole"}
    by_stage1 = views.candidate_rows(memory, context, RetrievalResult(kept, cands), sort="stage1")
    assert [r.item.id for r in by_stage1] == ["long", "short", "long2", "short2", "last", "top"]
    assert [r.stage1_rank for r in by_stage1] == [1, 2, 3, 4, 5, 6]


def test_next_after_sign_in_stays_inside_the_console(client):
    for target in ("https://evil.example/", "//evil.example/ui", "/v1/users"):
        r = client.post("/ui/login", data={"key": ALICE, "next": target}, follow_redirects=False)
        assert r.headers["location"] == "/ui", target


def test_a_user_id_or_question_in_the_address_is_escaped_too(client):
    bad = '<img src=x onerror="alert(1)">'
    for path, params in [("/ui/memories", {"user": bad}), ("/ui/context", {"user": "alice", "q": bad}),
                         ("/ui/memories", {"user": "alice", "q": bad, "session": bad})]:
        page = client.get(path, params=params, headers=auth(ADMIN)).text
        assert "<img src=x" not in page and "&lt;img src=x" in page, params
    page = client.get("/ui/memories", params={"user": "alice", "meta": bad}, headers=auth(ADMIN))
    assert page.status_code == 422 and "<img src=x" not in page.text


def test_signing_out_ends_the_session(client):
    token = sign_in(client, ALICE)
    assert client.post("/ui/logout", data={"csrf": "wrong"}).status_code == 403  # another site cannot sign you out
    r = client.post("/ui/logout", data={"csrf": token}, follow_redirects=False)
    assert r.status_code == 303 and session.COOKIE in r.headers["set-cookie"]
    assert client.get("/ui/memories", follow_redirects=False).status_code == 303
