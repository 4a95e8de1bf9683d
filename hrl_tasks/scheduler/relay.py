"""Direct calls relayed per host: one message out and one back per host, not per worker.

A round of direct calls handed to the engine together (``engine.together()``)
whose calls say ``relay=True`` (the synchronous plans' sample calls) goes, for
each host with two or more of the round's workers, as one ``("relay", items)``
message to one of them, the host's relay. The relay runs its own call as any
direct call, sends each host-mate its calls on a stream of its own to that
worker (the engine's stream protocol, `task_service`), and answers the engine
with the round's answers together: in one message once the last has come, or
what came by then ``ROUND_HOLD_S`` after the first.
The engine still decides every call (the state machine numbers each one); what
it saves is a message each way per worker: the driver's cost of a round grows
with the hosts, not with the workers.

Shared values (``engine.share``, a round's weights) go to each host once: the
mates fetch them from their relay, which fetches them (or was sent them) once.

What a relayed call may cost, and why it is asked for, not assumed:

- a host-mate that dies loses its own calls only (``"lost"`` in the relay's
  answer: the engine looks at that worker as at a broken stream to it);
- a relay that dies loses its own calls; its mates keep the answers of their
  relayed calls (each object's last two), and the engine asks each mate for its
  answer straight (``"recall"``): one that ran or runs answers, one that never got
  there fails with `WorkerLostError` (its turn on its object skipped), and the
  caller calls again, as for a lost worker: fine for a sample, not for a call that
  must run exactly once (a call in flight from the relay as it died may still run).
  So does a relay that stops reporting (frozen: its mates' answers would wait
  with it), once the scheduler's plugin says so (`worker_events.SILENT_S`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

from hrl_tasks.scheduler.errors import WorkerLostError
from hrl_tasks.scheduler.task_channel import TaskChannel

ROUND_HOLD_S = 0.05
"""How long a relay holds a round's first answers for the rest: the round's last answer
goes at once, so a round that ends together is one message, and a straggler keeps the
others' answers back this long at most (speculation backs it up meanwhile)."""


def host_of(address: str) -> str:
    """The host part of a worker address (``tcp://10.0.0.5:3456`` -> ``10.0.0.5``)."""
    rest = address.split("://", 1)[-1]
    host = rest.rsplit(":", 1)[0] if rest.count(":") == 1 or rest.startswith("[") else rest
    return host.strip("[]")


def relay_rounds(
    calls: Iterable, address_of: Callable, relayable: Callable
) -> tuple[list, list[tuple[str, list]]]:
    """Split one launch's direct ``calls`` into those sent on their own and the rounds
    to relay: ``(singles, [(relay address, calls), ...])``. A host's relayable calls
    form a round when they go to two or more of its workers; the relay is the worker
    of the host's first such call. Order is kept within each part. Pure."""
    by_host: dict[str, list] = {}
    singles = []
    for call in calls:
        if relayable(call):
            by_host.setdefault(host_of(address_of(call)), []).append(call)
        else:
            singles.append(call)
    rounds = []
    for members in by_host.values():
        if len({address_of(call) for call in members}) < 2:
            singles += members
        else:
            rounds.append((address_of(members[0]), members))
    return singles, rounds


class RelayRound:
    """The answers of one relayed round not sent yet. Pure."""

    def __init__(self, keys: Iterable[str]):
        self.pending = set(keys)
        self.answers: list[tuple] = []
        self.send_due = False  # a send of what came is scheduled

    def answer(self, message: tuple) -> bool:
        """Note one answer (``("done", key, ...)``); whether the round is complete."""
        if message[1] in self.pending:
            self.pending.discard(message[1])
            self.answers.append(message)
        return not self.pending

    def take(self) -> list[tuple]:
        """The answers noted since the last take."""
        answers, self.answers, self.send_due = self.answers, [], False
        return answers


class HostRelay:
    """A worker's side of the rounds relayed through it, on one engine's stream.

    ``answer(messages)`` puts messages on that stream; ``run_here(key, spec, call)``
    runs one of the round's calls on this worker as any direct call, its answer
    coming back through :meth:`answered`. Runs on the worker's event loop.
    """

    def __init__(self, address: str, connection_args: dict, connect_s: float, answer):
        self.address = address
        self.connection_args = connection_args
        self.connect_s = connect_s
        self.answer = answer
        self.channels: dict = {}  # mate address -> TaskChannel (this worker's stream to it)
        self.round_of: dict[str, RelayRound] = {}  # key -> its round
        self.sent_to: dict[str, set[str]] = {}  # mate address -> keys awaited from it

    def relay(self, items: list, run_here: Callable) -> None:
        """One round: ``items`` of ``(address, key, spec, call)``."""
        relayed = RelayRound(key for _, key, _, _ in items)
        for address, key, spec, call in items:
            self.round_of[key] = relayed
            if address == self.address:
                run_here(key, spec, call)
            else:
                self.sent_to.setdefault(address, set()).add(key)
                self._channel(address).call(key, spec, call)

    def answered(self, message: tuple) -> bool:
        """A ``("done", key, ...)`` of this worker's or a mate's call: whether it was
        one of a round's (then it goes with the round's other answers)."""
        relayed = self.round_of.pop(message[1], None)
        if relayed is None:
            return False
        if relayed.answer(message):
            self._send(relayed)
        elif not relayed.send_due:  # a straggler holds the others back this long at most
            relayed.send_due = True
            asyncio.get_running_loop().call_later(ROUND_HOLD_S, self._send, relayed)
        return True

    def _send(self, relayed: RelayRound) -> None:
        answers = relayed.take()
        if answers:
            self.answer(answers)

    def close(self) -> None:
        """The engine's stream ended: the streams to the mates go too."""
        for channel in list(self.channels.values()):
            channel.close()
        self.channels.clear()

    def _channel(self, address: str):
        channel = self.channels.get(address)
        if channel is None or channel.closed:
            channel = self.channels[address] = TaskChannel(
                address, self.connection_args, self.connect_s, self._mate_answers, self._cut
            )
        return channel

    def _mate_answers(self, address: str, answers: list) -> None:
        for message in answers:
            if message[0] == "done":
                self.sent_to.get(address, set()).discard(message[1])
                self.answered(message)

    def _cut(self, address: str, keys: tuple | None) -> None:
        """The stream to a mate broke: its calls are lost (the engine decides whether
        with their worker), the round goes on without them."""
        lost = self.sent_to.pop(address, set()) if keys is None else set(keys)
        if keys is not None:
            self.sent_to.get(address, set()).difference_update(keys)
        for key in sorted(lost):
            self.answered(("done", key, "lost", address, None))


def relay_lost(name: str, address: str) -> WorkerLostError:
    """The error of a relayed call whose relay was lost before it got to its worker."""
    return WorkerLostError(
        f"{name}: the call to {address} went through its host's relay, which was lost "
        "before the call got there"
    )
