"""The relay's decisions (`hrl_tasks.scheduler.relay`): which calls go together
through which worker, when a round is complete, where host-mates fetch shared values."""

from hrl_tasks.scheduler.relay import RelayRound, host_of, relay_rounds
from hrl_tasks.scheduler.shared import SharedRef, SharedValue, fetched_from


def test_host_of_takes_the_host_of_any_address():
    assert host_of("tcp://10.0.0.5:3456") == "10.0.0.5"
    assert host_of("tls://node-3.cluster:40000") == "node-3.cluster"
    assert host_of("tcp://[fe80::1]:8786") == "fe80::1"
    assert host_of("inproc://10.0.0.5/1234/1") == "10.0.0.5/1234/1"


def test_a_host_with_two_workers_or_more_is_one_round_through_its_first():
    calls = [
        ("a", "tcp://10.0.0.1:1"),
        ("b", "tcp://10.0.0.2:1"),
        ("c", "tcp://10.0.0.1:2"),
        ("d", "tcp://10.0.0.1:3"),
        ("e", "tcp://10.0.0.2:1"),  # the same worker twice: one worker, no round
        ("f", "tcp://10.0.0.3:1"),
    ]
    singles, rounds = relay_rounds(calls, lambda c: c[1], lambda c: c[0] != "f")
    assert rounds == [("tcp://10.0.0.1:1", [calls[0], calls[2], calls[3]])]
    assert sorted(singles) == sorted([calls[5], calls[1], calls[4]])


def test_calls_that_did_not_ask_for_a_relay_go_on_their_own():
    calls = [("a", "tcp://h:1"), ("b", "tcp://h:2"), ("c", "tcp://h:3")]
    singles, rounds = relay_rounds(calls, lambda c: c[1], lambda c: c[0] != "b")
    assert rounds == [("tcp://h:1", [calls[0], calls[2]])]
    assert singles == [calls[1]]


def test_a_round_is_complete_with_its_last_answer_and_ignores_others():
    relayed = RelayRound(["k1", "k2"])
    assert not relayed.answer(("done", "k1", "OK", 1, None))
    assert not relayed.answer(("done", "other", "OK", 0, None))
    assert relayed.answer(("done", "k2", "lost", "tcp://h:2", None))
    assert [m[1] for m in relayed.answers] == ["k1", "k2"]


def test_host_mates_fetch_a_shared_value_from_their_relay():
    arguments = ((SharedRef("w", "tcp://other:1"), 3), {"v": SharedRef("v", "tcp://other:1")})
    moved = fetched_from(arguments, {"w"}, "tcp://relay:1")
    assert moved == ((SharedRef("w", "tcp://relay:1"), 3), {"v": SharedRef("v", "tcp://other:1")})
    assert fetched_from(SharedValue("w", 1), {"w"}, "tcp://relay:1") == SharedValue("w", 1)
