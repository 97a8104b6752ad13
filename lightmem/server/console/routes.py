"""The console's pages under ``/ui``: server-rendered HTML over the same ``Memory``, keys and tenancy as the API.

Every page names the user it shows in its query (``?user=alice``) and is refused (403) unless the caller's key
covers that user (``Principal.may_act_for``, the API's rule); an item id of another user is answered as one
that does not exist (404), as the API answers it. Changes go through ``Memory.update``, ``archive``,
``restore`` and ``delete`` under the worker's lock, as the API's routes call them.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode

from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

import lightmem
from lightmem.errors import InvalidInputError, ItemNotFoundError
from lightmem.memory import Memory
from lightmem.server.console import session, views
from lightmem.server.console.session import Visitor
from lightmem.validation import check_budget

log = logging.getLogger(__name__)
HERE = Path(__file__).parent
# No script may run on these pages (there is none to run), styles come from the console's own file only, and
# forms post back to the console alone; no other site may frame it. Referrers stay on the site (queries hold
# user ids and search words); "no-referrer" would make browsers send "Origin: null" with the forms.
CSP = ("default-src 'none'; script-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
       "frame-ancestors 'none'; base-uri 'none'")
SECURITY_HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "same-origin",
                    "Cache-Control": "no-store", "X-Frame-Options": "DENY"}
MAX_FORM_BYTES = 1 << 20


class Refused(Exception):
    """A page the caller may not see: rendered as an error page with ``status``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


def _environment() -> Environment:
    env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(default=True,
                      default_for_string=True), undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["when"] = views.when
    env.filters["num"] = lambda v, d=3: "" if v is None else f"{v:.{d}f}"
    env.globals["qs"] = lambda params: urlencode({k: v for k, v in params.items() if v not in ("", None)})  # blanks left out
    return env


def console_router(index_status: Callable[[dict[str, Any]], dict[str, Any]]) -> APIRouter:
    """The ``/ui`` routes; ``create_app`` includes them.

    Args:
        index_status: What ``/healthz`` makes of ``Memory.index_status()`` (errors named by kind only); the
            status page shows the same.
    """
    env = _environment()
    css = (HERE / "static" / "console.css").read_bytes()

    def clock(request: Request) -> None:
        request.state.console_t0 = time.perf_counter()

    r = APIRouter(prefix="/ui", include_in_schema=False, dependencies=[Depends(clock)])

    def render(request: Request, name: str, status: int = 200, **ctx: Any) -> HTMLResponse:
        who = ctx.pop("who", None)
        html = env.get_template(name).render(who=who, version=lightmem.__version__, **ctx)
        return _finish(request, HTMLResponse(html, status_code=status))

    def failure(request: Request, who: Visitor | None, status: int, message: str) -> HTMLResponse:
        user = getattr(request.state, "console_user", None)  # set once the key was found to cover the page's user
        return render(request, "error.html", status=status, who=who, user=user, message=message, status_code=status)

    def page(handler: Callable[..., Response]) -> Callable[..., Response]:
        """Sign-in, the user's check and error pages around a sync page handler ``handler(request, who, ...)``."""
        def run(request: Request, *args: Any) -> Response:
            who = session.visitor(request, request.app.state.keys)
            if who is None:
                return _to_login(request)
            try:
                return handler(request, who, *args)
            except Refused as exc:
                return failure(request, who, exc.status, exc.message)
            except ItemNotFoundError as exc:
                return failure(request, who, 404, str(exc))
            except InvalidInputError as exc:
                return failure(request, who, 422, str(exc))
        return run

    # -- sign-in ---------------------------------------------------------------------------
    @r.get("/login")
    def login_form(request: Request, next: str = "/ui") -> HTMLResponse:
        return render(request, "login.html", user=None, next=_local(next), error="")

    @r.post("/login")
    async def login(request: Request) -> Response:
        form = await _form(request)
        target = _local(form.get("next", "/ui"))
        if not session.same_origin(request):
            return render(request, "login.html", status=403, user=None, next=target,
                          error="Sign-in refused: the form was not sent from this console.")
        principal = request.app.state.keys.identify(form.get("key", "").strip())
        if principal is None:
            log.info("console sign-in refused: not a key of the keys file")
            return render(request, "login.html", status=401, user=None, next=target,
                          error="That is not an API key of this server.")
        response = _finish(request, RedirectResponse(target, status_code=303))
        session.sign_in(response, request, request.app.state.keys, principal)
        return response

    @r.post("/logout")
    async def logout(request: Request) -> Response:
        form = await _form(request)
        who = session.visitor(request, request.app.state.keys)
        if who is not None and not session.form_allowed(request, who, form.get("csrf")):
            return failure(request, who, 403, "This form did not come from your console session; reload the page.")
        response = _finish(request, RedirectResponse("/ui/login", status_code=303))
        session.sign_out(response)
        return response

    @r.get("/static/console.css")
    def stylesheet(request: Request) -> Response:
        return _finish(request, Response(css, media_type="text/css"))

    # -- pages -----------------------------------------------------------------------------
    @r.get("")
    @r.get("/")
    def home(request: Request) -> Response:
        def show(request: Request, who: Visitor) -> Response:
            users = who.principal.users
            if users is not None and len(users) == 1:
                return _finish(request, RedirectResponse("/ui/memories?" + urlencode({"user": next(iter(users))}), 303))
            return _finish(request, RedirectResponse("/ui/users", 303))
        return page(show)(request)

    @r.get("/users")
    def users(request: Request) -> Response:
        def show(request: Request, who: Visitor) -> Response:
            with _memory(request) as memory:
                rows = views.user_rows(memory, who.visible_users(memory))
                ltm = memory.ltm_stats()
            return render(request, "users.html", who=who, user=None, rows=rows, ltm=ltm)
        return page(show)(request)

    @r.get("/memories")
    def memories(request: Request, user: str = "") -> Response:
        def show(request: Request, who: Visitor) -> Response:
            uid = _user(request, who, user)
            query = views.ListQuery.of(request.query_params)
            listing, problems = None, query.problems()  # mistyped filters: said on the page, the form as it was sent
            if not problems:
                with _memory(request) as memory:
                    try:
                        listing = views.list_page(memory, uid, query)
                    except InvalidInputError as exc:  # the store's own checks (the text, the user id)
                        problems = {"": str(exc)}
            return render(request, "memories.html", status=422 if problems else 200, who=who, user=uid, query=query,
                          listing=listing, problems=problems, notice=request.query_params.get("deleted", ""))
        return page(show)(request)

    @r.get("/memory")
    def memory_page(request: Request, user: str = "", id: str = "") -> Response:
        def show(request: Request, who: Visitor) -> Response:
            uid = _user(request, who, user)
            with _memory(request) as memory:
                found = views.detail(memory, uid, id)
            return render(request, "memory.html", who=who, user=uid, d=found, item=found.item, error="", draft=None,
                          keep_history=False)
        return page(show)(request)

    @r.get("/memory/delete")
    def confirm_delete(request: Request, user: str = "", id: str = "") -> Response:
        def show(request: Request, who: Visitor) -> Response:
            uid = _user(request, who, user)
            with _memory(request) as memory:
                item = memory.get(id, uid, include_archived=True)
            return render(request, "delete.html", who=who, user=uid, item=item, error="")
        return page(show)(request)

    @r.post("/memory/{action}")
    async def change(request: Request, action: str, user: str = "", id: str = "") -> Response:
        form = await _form(request)

        def act(request: Request, who: Visitor) -> Response:
            if action not in ("edit", "archive", "restore", "delete"):
                raise Refused(404, f"no action {action!r}")
            if not session.form_allowed(request, who, form.get("csrf")):
                raise Refused(403, "This form did not come from your console session; reload the page and try again.")
            uid = _user(request, who, user)
            with _memory(request) as memory:
                try:
                    if action == "edit":
                        memory.update(id, uid, text=form.get("text", ""), keep_history=form.get("keep_history") == "1")
                    elif action == "archive":
                        memory.archive(id, uid)
                    elif action == "restore":
                        memory.restore(id, uid)
                    else:
                        if form.get("confirm") != "yes":
                            raise InvalidInputError("Deleting a memory needs its confirmation: tick the box, then delete.")
                        memory.delete(id, uid)
                        return _finish(request, RedirectResponse("/ui/memories?" + urlencode({"user": uid, "deleted": id}),
                                                                 303))
                except InvalidInputError as exc:  # the page the form was on, saying why, with what was typed
                    if action == "delete":
                        item = memory.get(id, uid, include_archived=True)
                        return render(request, "delete.html", status=422, who=who, user=uid, item=item, error=str(exc))
                    found = views.detail(memory, uid, id)
                    return render(request, "memory.html", status=422, who=who, user=uid, d=found, item=found.item,
                                  error=str(exc), draft=form.get("text") if action == "edit" else None,
                                  keep_history=action == "edit" and form.get("keep_history") == "1")
            return _finish(request, RedirectResponse("/ui/memory?" + urlencode({"user": uid, "id": id}), 303))
        return await run_in_threadpool(page(act), request)

    @r.get("/context")
    def context(request: Request, user: str = "", q: str = "", stm: str = "", budget: str = "",
                sort: str = "ranker") -> Response:
        def show(request: Request, who: Visitor) -> Response:
            uid = _user(request, who, user)
            turns = [line for line in stm.splitlines() if line.strip()]
            ctx = result = None
            rows: list[views.CandidateRow] = []
            problems: dict[str, str] = {}  # a field's name ("" for the inspection as a whole) -> what is wrong
            with _memory(request) as memory:
                default_budget = memory.composer.budget  # the memory's own default (Memory.open's budget=)
                for name, check in (("sort", lambda: views.check_sort(sort)), ("budget", lambda: _budget(budget))):
                    try:
                        check()
                    except InvalidInputError as exc:
                        problems[name] = str(exc)
                if q.strip() and not problems:
                    try:
                        limit = _budget(budget) or default_budget
                        ctx, result = memory.explain_context(q, uid, stm=turns, budget=limit)
                        rows = views.candidate_rows(memory, ctx, result, sort)
                    except InvalidInputError as exc:  # a question or turns too long...: said on the page
                        ctx, result, rows, problems[""] = None, None, [], str(exc)
            return render(request, "context.html", status=422 if problems else 200, who=who, user=uid, q=q, stm=stm,
                          budget=budget, sort=sort if sort in views.SORTS else "ranker", default_budget=default_budget,
                          ctx=ctx, rows=rows, times=views.stage_times(result), problems=problems)
        return page(show)(request)

    @r.get("/status")
    def status(request: Request) -> Response:
        def show(request: Request, who: Visitor) -> Response:
            with _memory(request) as memory:
                info = {"store": memory.store.info(), "index": index_status(memory.index_status()),
                        "views": memory.store.cache_stats(), "ltm": memory.ltm_stats()}
                rows = views.user_rows(memory, who.visible_users(memory))
            return render(request, "status.html", who=who, user=None, info=info, rows=rows)
        return page(show)(request)

    return r


# -- helpers -------------------------------------------------------------------------------
def _finish(request: Request, response: Response) -> Response:
    """The console's security headers, and the server time spent on the request (``Server-Timing``)."""
    response.headers.update(SECURITY_HEADERS)
    t0 = getattr(request.state, "console_t0", None)
    if t0 is not None:
        response.headers["Server-Timing"] = f"app;dur={(time.perf_counter() - t0) * 1000:.1f}"
    return response


def _to_login(request: Request) -> Response:
    if request.headers.get("authorization"):  # a script's wrong key: say so, do not send it to a form
        response = HTMLResponse("<!doctype html><title>401</title><p>Missing or invalid API key.</p>", status_code=401,
                                headers={"WWW-Authenticate": "Bearer"})
        return _finish(request, response)
    here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return _finish(request, RedirectResponse("/ui/login?" + urlencode({"next": here}), status_code=303))


def _local(target: str) -> str:
    """A redirect target inside the console only (never another site's address)."""
    return target if target.startswith("/ui") and not target.startswith("//") and "\\" not in target else "/ui"


def _user(request: Request, who: Visitor, user: str) -> str:
    """The user a page shows: the one asked for, if the key covers it (a key of one user needs not ask). Kept on
    ``request.state`` so that an error page of this user's still links to the user's pages."""
    if not user:
        users = who.principal.users
        if users is not None and len(users) == 1:
            user = next(iter(users))
        else:
            raise Refused(422, "Choose a user: add ?user=<id> to the address, or pick one on the Users page.")
    elif not who.principal.may_act_for(user):
        log.info("console 403: %s may not act for the user asked", who.principal.label)
        raise Refused(403, f"This API key may not act for user {user!r}.")
    request.state.console_user = user
    return user


def _budget(raw: str) -> int | None:
    """The inspector's budget field: None when blank (the memory's default), else a number of tokens it accepts."""
    if not raw.strip():
        return None
    try:
        value = int(raw)
    except ValueError as exc:
        raise InvalidInputError(f"the budget must be a whole number of tokens, got {raw!r}") from exc
    return check_budget(value)


@contextmanager
def _memory(request: Request) -> Iterator[Memory]:
    """The worker's ``Memory``, one call at a time (the lock the API's routes take)."""
    with request.app.state.memory_lock:
        yield request.app.state.memory


async def _form(request: Request) -> dict[str, str]:
    """A urlencoded form's fields (the last value of each), read without python-multipart."""
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        return {}
    fields = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
    return {k: v[-1] for k, v in fields.items()}
