"""The engine's live page, on the in-process engine (no cluster)."""

import json
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
