"""The engine's live page, on the in-process engine (no cluster)."""

import json
import socket
import urllib.request

import pytest

import hrl_tasks as hrl
from tests.scheduler import tasks


def test_the_page_counts_tasks_by_name_and_escapes_what_it_shows():
    with hrl.SyncEngine() as engine:
        engine.submit(tasks.inc, 1, name="<b>inc</b>").result()
        engine.submit(tasks.inc, 2, name="<b>inc</b>").result()
        with pytest.raises(ValueError):
            engine.submit(tasks.fail, "no", name="fails").result()
        link = engine.page_link
        view = json.loads(urllib.request.urlopen(f"{link}json", timeout=5).read())
        assert view["by_name"]["<b>inc</b>"] == {"in_flight": 0, "finished": 2, "failed": 0}
        assert view["by_name"]["fails"]["failed"] == 1
        page = urllib.request.urlopen(link, timeout=5).read().decode()
        assert "&lt;b&gt;inc&lt;/b&gt;" in page and "<b>inc</b>" not in page
        with pytest.raises(urllib.error.HTTPError, match="404"):
            urllib.request.urlopen(f"{link}nothing", timeout=5)
    with pytest.raises(OSError):  # closed with its engine
        urllib.request.urlopen(link, timeout=2)


def get(url: str, host: str | None = None) -> int:
    """The status of a GET of ``url`` (with ``host`` as its Host header if given)."""
    headers = {} if host is None else {"Host": host}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as error:
        return error.code


def test_the_page_answers_only_its_token_and_its_own_loopback_host():
    with hrl.SyncEngine() as engine:
        link = engine.page_link
        scheme, _, address, token, rest = link.split("/")
        port = address.rpartition(":")[2]
        assert (scheme, address, rest) == ("http:", f"127.0.0.1:{port}", "")
        assert len(token) >= 32
        assert get(link) == 200 and get(f"{link}json") == 200
        root = f"http://127.0.0.1:{port}/"
        for url in (
            root,
            f"{root}json",
            f"{root}{token[:-1]}/json",
            f"{root}json/{token}/",
            f"{root}?token={token}",
            f"{root}{token}x/",
        ):
            assert get(url) == 403, url
        for host in (f"localhost:{port}", f"[::1]:{port}", f"127.0.0.1:{port}"):
            assert get(f"{link}json", host=host) == 200, host
        for host in (f"evil.example:{port}", "127.0.0.1:1", f"localhost.evil.example:{port}"):
            assert get(f"{link}json", host=host) == 403, host
        page = urllib.request.urlopen(link, timeout=5).read().decode()
        assert '<meta http-equiv="refresh" content="1">' in page  # reloads itself, token kept
        assert token not in page


def test_a_closed_page_releases_its_port_and_its_thread():
    from hrl_tasks.scheduler.page import EnginePage

    with hrl.SyncEngine() as engine:
        page = EnginePage(engine.view)
        host, port = page.server.server_address[:2]
        assert get(page.link) == 200
        page.close()
    assert not page.thread.is_alive()
    with pytest.raises(OSError):
        socket.create_connection((host, port), timeout=1).close()
