"""Rollout worker processes map mid-sized blocks on their own (glibc's mmap threshold)."""

import subprocess
import sys
import textwrap

import pytest

from hrl_tasks.rollout.malloc import ARENA_VARIABLE, ENV_VARIABLE, limit_arenas, map_blocks_from

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")

PROBE = textwrap.dedent(
    """
    import ctypes, sys
    from hrl_tasks.rollout.malloc import map_blocks_from

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in (
            "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost"
        ).split()]

    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = MallInfo2
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, (ctypes.c_size_t,)
    libc.free.argtypes = (ctypes.c_void_p,)
    did = map_blocks_from(int(sys.argv[1])) if sys.argv[1] != "none" else None
    # Hold 400 blocks of 20 KiB (8 MB): once the heap's free chunks are used up, glibc
    # either grows the heap for the rest or maps each on its own.
    before = libc.mallinfo2().hblks
    blocks = [libc.malloc(20 * 1024) for _ in range(400)]
    mapped = libc.mallinfo2().hblks - before
    for block in blocks:
        libc.free(block)
    print(did, mapped)
    """
)


def mapped_after(setting: str, env: dict | None = None) -> tuple[str, int]:
    run = subprocess.run([sys.executable, "-c", PROBE, setting], capture_output=True,
                         text=True, check=True, env=env)  # fmt: skip
    did, mapped = run.stdout.split()
    return did, int(mapped)


def test_20_kib_blocks_that_would_grow_the_heap_are_mapped_once_the_threshold_is_16_kib():
    assert mapped_after("none") == ("None", 0)  # glibc's default: the heap grows
    did, mapped = mapped_after(str(16 * 1024))
    assert did == "True" and mapped >= 200


def test_the_users_own_setting_in_the_environment_is_left_alone(monkeypatch):
    import os

    kept = mapped_after(str(16 * 1024), {**os.environ, ENV_VARIABLE: "131072"})
    assert kept == ("False", 0)
    monkeypatch.setenv(ENV_VARIABLE, "131072")
    assert map_blocks_from() is False


ARENAS = textwrap.dedent(
    """
    import ctypes, sys, threading
    from hrl_tasks.rollout.malloc import limit_arenas

    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, (ctypes.c_size_t,)
    did = limit_arenas(int(sys.argv[1])) if sys.argv[1] != "none" else None
    together = threading.Barrier(8)

    def allocate():  # eight threads that allocate at once, each holding its block
        together.wait()
        libc.malloc(1024)
        together.wait()

    threads = [threading.Thread(target=allocate) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print(did, flush=True)
    libc.malloc_stats()  # a block per arena on stderr, each headed "Arena <n>:"
    """
)


def arenas_after(setting: str, env: dict | None = None) -> tuple[str, int]:
    run = subprocess.run([sys.executable, "-c", ARENAS, setting], capture_output=True,
                         text=True, check=True, env=env)  # fmt: skip
    return run.stdout.strip(), run.stderr.count("Arena ")


def test_threads_that_allocate_together_share_two_arenas_once_they_are_limited():
    did, arenas = arenas_after("none")
    assert did == "None" and arenas >= 5  # glibc's default: an arena per thread, up to 8 a core
    assert arenas_after("2") == ("True", 2)


def test_the_users_own_arena_setting_is_left_alone(monkeypatch):
    import os

    did, arenas = arenas_after("2", {**os.environ, ARENA_VARIABLE: "4"})
    assert (did, arenas) == ("False", 4)
    monkeypatch.setenv(ARENA_VARIABLE, "4")
    assert limit_arenas() is False
