"""The engine's live page: what runs where, served by the driver.

Dask's dashboard shows the tasks its scheduler runs; tasks of the direct route
skip it. This page shows every engine task by worker and by name, and the
stateful objects, from the engine's own state (`EngineState.view`); it
refreshes itself every second. Served by a small HTTP server in a thread of the
driver, on 127.0.0.1 and a free port, from the first time its address is asked
for (``engine.page_link``).

The link holds a random token as its first path segment: ``/TOKEN/`` is the
page, ``/TOKEN/json`` the same as JSON, and the page's refresh reloads its own
address, token included. Any other user of the machine can reach a loopback
port, and a web page can through DNS rebinding, so `answer` refuses with 403 a
request without the token (compared in constant time) or addressed to another
host than the server's own loopback ``host:port`` (``127.0.0.1``, ``localhost``,
``[::1]``).
"""

from __future__ import annotations

import contextlib
import hmac
import html
import json
import secrets
import socket
import threading
from collections.abc import Callable, Collection
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

REFRESH_S = 1
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
PARTS = {"": "page", "json": "json"}
"""What follows the token in a path, and what it serves."""


def own_hosts(host: str, port: int) -> frozenset[str]:
    """The ``Host`` headers a request to the server at ``host:port`` may carry. Pure."""
    return frozenset(f"{name}:{port}".lower() for name in (*LOOPBACK_NAMES, host))


def answer(target: str, host_header: str | None, token: str, hosts: Collection[str]):
    """What a GET of ``target`` gets: ``(200, "page")``, ``(200, "json")``, or an error
    status and its reason. Pure.

    Args:
        target: The request's target, e.g. ``/TOKEN/json``.
        host_header: Its ``Host`` header (None if it had none).
        token: The page's token.
        hosts: The ``Host`` headers accepted (`own_hosts`).
    """
    if (host_header or "").lower() not in hosts:
        return 403, "the engine's page answers requests to its own loopback address only"
    given, _, rest = urlsplit(target).path.removeprefix("/").partition("/")
    if not hmac.compare_digest(given.encode(), token.encode()):
        return 403, "the engine's page needs the token of its link (engine.page_link)"
    if rest not in PARTS:
        return 404, "the engine's page has / and /json under its token"
    return 200, PARTS[rest]


def render(view: dict) -> str:
    """The page's HTML for one `EngineState.view`."""
    esc = html.escape
    rows = []
    for worker, info in view["workers"].items():
        tasks = info["tasks"]
        shown = ", ".join(
            f"{esc(t['name'])} ({'running' if t['started'] else 'sent'}"
            + (f", {t['age_s']:.1f} s" if t["age_s"] is not None else "")
            + ")"
            for t in tasks[:20]
        ) + (f" and {len(tasks) - 20} more" if len(tasks) > 20 else "")
        rows.append(
            f"<tr><td>{esc(worker)}</td><td>{info['threads'] or ''}</td>"
            f"<td>{len(tasks)}</td><td>{shown}</td></tr>"
        )
    names = [
        f"<tr><td>{esc(name)}</td><td>{n['in_flight']}</td><td>{n['finished']}</td>"
        f"<td>{n['failed']}</td></tr>"
        for name, n in view["by_name"].items()
    ]
    objects = [
        f"<tr><td>{esc(o['name'])}</td><td>{esc(o['address'] or 'no home yet')}</td>"
        f"<td>{'alive' if o['alive'] else 'ended'}</td><td>{o['restarts']}</td></tr>"
        for o in view["objects"]
    ]
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><meta http-equiv="refresh" content="{REFRESH_S}">
<title>hrl_tasks engine</title>
<style>body{{font-family:sans-serif;margin:1em}}table{{border-collapse:collapse;margin-bottom:1.5em}}
td,th{{border:1px solid #ccc;padding:2px 8px;text-align:left}}</style></head><body>
<h2>Workers</h2>
<table><tr><th>worker</th><th>threads</th><th>tasks</th><th>what (running, or sent and queued there)</th></tr>
{"".join(rows)}</table>
<p>Waiting in the engine for a free slot: {view["waiting_for_a_slot"]}</p>
<h2>Tasks by name</h2>
<table><tr><th>name</th><th>in flight</th><th>finished</th><th>failed</th></tr>
{"".join(names)}</table>
<h2>Stateful workers</h2>
<table><tr><th>name</th><th>worker</th><th>status</th><th>restarts</th></tr>
{"".join(objects)}</table>
</body></html>"""


class EnginePage:
    """An HTTP server in a daemon thread serving ``view()`` as a page and as JSON."""

    def __init__(self, view: Callable[[], dict], host: str = "127.0.0.1"):
        self.token = secrets.token_urlsafe(24)

        def handler_class(*args):
            return _Handler(view, self.token, self.hosts, *args)

        self.server = ThreadingHTTPServer((host, 0), handler_class)
        self.hosts = own_hosts(host, self.server.server_address[1])
        self.server.daemon_threads = True
        self.thread = threading.Thread(
            target=self.server.serve_forever, name="hrl-tasks-page", daemon=True
        )
        self.thread.start()

    @property
    def link(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}/{self.token}/"

    def close(self) -> None:
        """Stop serving and release the port. The server's loop sees a shutdown only
        between waits of up to 0.5 s (socketserver's poll, a fifth of a one-iteration
        run here), so a connection of its own wakes it: shorter polls would wake the
        driver all run long (at 0.05 s, 2.4 ms of CPU a second)."""
        stopping = threading.Thread(target=self.server.shutdown, name="hrl-tasks-page-stop")
        stopping.start()
        while stopping.is_alive():
            with contextlib.suppress(OSError):
                socket.create_connection(self.server.server_address[:2], timeout=0.1).close()
            stopping.join(0.01)
        self.server.server_close()


class _Handler(BaseHTTPRequestHandler):
    def __init__(self, view, token: str, hosts: frozenset[str], *args):
        self.view, self.token, self.hosts = view, token, hosts
        super().__init__(*args)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        status, what = answer(self.path, self.headers.get("Host"), self.token, self.hosts)
        if status != 200:
            self.send_error(status, what)
            return
        if what == "json":
            body, kind = json.dumps(self.view()).encode(), "application/json"
        else:
            body, kind = render(self.view()).encode(), "text/html; charset=utf-8"
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format, *args) -> None:  # noqa: A002 - quiet: no line per request
        pass
