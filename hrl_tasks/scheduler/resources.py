"""Resource requests and the ledger of what is held where.

The ledger is plain state with pure steps, tested without a cluster.

State:
    capacity[worker]  what each worker declared (``CPU``, ``GPU``, ``memory``,
                      any custom name), recorded when the worker joins.
    holdings[holder]  (worker, request) for everything this engine holds:
                      its stateful workers, for their lifetime.
    others[worker]    holder -> request for what other engines on the same
                      cluster hold there (nested engines in tasks, other
                      clients), as last read from the scheduler; counted as
                      held, so every engine sees the ledger as the root does.

Selection policy of :meth:`Ledger.choose`: among the workers where the request
fits in what is free now (those in ``avoid`` only when no other has room),
``"spread"`` takes the one holding the fewest things (ties: most free of the
requested resources, then address), ``"pack"`` takes the one holding the most
(ties: least free, then address), so a group of stateful workers either spreads
over the cluster or fills one machine first. The common choice, ``"spread"`` of a
request of nothing, is read from a `KeptOrder` of ``(things held, address)`` in
O(log W); a request of resources or ``"pack"`` looks at every worker. A task's own worker is what its
nested engine avoids: its rollout workers then do not share the process that
runs its learner.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from hrl_tasks.scheduler.errors import ResourceError
from hrl_tasks.scheduler.kept_order import KeptOrder

Request = dict[str, float]
STRATEGIES = ("spread", "pack")


def normalize_request(resources: Mapping[str, float] | None) -> Request:
    """Check a resource request and return it as a plain dict without zeros.

    Args:
        resources: resource name to amount, e.g. ``{"CPU": 1, "GPU": 0.5}``.

    Returns:
        The request with float amounts; ``{}`` for ``None``.

    Raises:
        TypeError: if it is not a mapping of names to numbers.
        ValueError: if an amount is negative or not finite (nan, inf).
    """
    if resources is None:
        return {}
    if not isinstance(resources, Mapping):
        raise TypeError(
            f"resources must be a mapping such as {{'CPU': 1}}, got {type(resources).__name__}"
        )
    request: Request = {}
    for name, amount in resources.items():
        if not isinstance(name, str):
            raise TypeError(f"resource names must be strings, got {name!r}")
        if isinstance(amount, bool) or not isinstance(amount, (int, float)):
            raise TypeError(f"resource {name!r} must be a number, got {amount!r}")
        if not math.isfinite(amount):
            raise ValueError(f"resource {name!r} must be a finite number, got {amount}")
        if amount < 0:
            raise ValueError(f"resource {name!r} must be >= 0, got {amount}")
        if amount > 0:
            request[name] = float(amount)
    return request


def fits(request: Mapping[str, float], available: Mapping[str, float]) -> bool:
    """Whether every resource of ``request`` is present in ``available`` in that amount."""
    return all(available.get(name, 0.0) >= amount - 1e-9 for name, amount in request.items())


def describe(capacity: Mapping[str, Mapping[str, float]]) -> str:
    """One line per worker listing its resources, for error messages."""
    if not capacity:
        return "  (no workers)"
    return "\n".join(f"  {worker}: {shown(res)}" for worker, res in sorted(capacity.items()))


def shown(resources: Mapping[str, float]) -> str:
    """``CPU=1, GPU=0`` (or ``no resources``), for messages."""
    return ", ".join(f"{k}={v:g}" for k, v in sorted(resources.items())) or "no resources"


def check_satisfiable(
    request: Mapping[str, float], capacity: Mapping[str, Mapping[str, float]]
) -> None:
    """Raise :class:`ResourceError` if no worker could ever meet ``request``.

    An empty cluster is not judged: workers may still be starting (an adaptive
    or batch-queue cluster), so the request waits for them.
    """
    if not request or not capacity:
        return
    if any(fits(request, res) for res in capacity.values()):
        return
    wanted = ", ".join(f"{k}={v:g}" for k, v in sorted(request.items()))
    raise ResourceError(
        f"no worker can ever satisfy the resource request {{{wanted}}}. "
        f"The workers declare:\n{describe(capacity)}\n"
        "Ask for less, or start workers that declare it "
        "(Engine.local(resources={...}) or `dask worker --resources NAME=N`)."
    )


@dataclass
class Ledger:
    """What each worker declared and what is held on it, by holder id."""

    capacity: dict[str, Request] = field(default_factory=dict)
    holdings: dict[str, tuple[str, Request]] = field(default_factory=dict)
    others: dict[str, dict[str, Request]] = field(default_factory=dict)
    released: set[str] = field(default_factory=set)  # own holders the scheduler may still show
    # Indexes of the above, kept by the methods below: own holders per worker, and the
    # workers by things held (spread's order).
    _mine_on: dict[str, dict[str, Request]] = field(default_factory=dict, repr=False)
    _fewest: KeptOrder = field(default_factory=KeptOrder, repr=False)

    def __post_init__(self):
        for holder, (worker, request) in self.holdings.items():
            self._mine_on.setdefault(worker, {})[holder] = request
        for worker in self.capacity:
            self._recount(worker)

    def _recount(self, worker: str) -> None:
        if worker in self.capacity:
            self._fewest.set(worker, (self.count_on(worker), worker))
        else:
            self._fewest.remove(worker)

    def see_others(self, held: Mapping[str, Mapping[str, Mapping[str, float]]]) -> None:
        """Record what is held per worker (holder -> request, as the scheduler keeps it
        for every engine); this engine's own holders, and those it released (a read
        may predate the release), are left out."""
        mine = set(self.holdings) | self.released
        self.others = {
            worker: {h: dict(r) for h, r in holders.items() if h not in mine}
            for worker, holders in held.items()
        }
        shown = {h for holders in held.values() for h in holders}
        self.released &= shown  # once the scheduler forgot them, they stay forgotten
        for worker in self.capacity:
            self._recount(worker)

    def problems(self) -> list[str]:
        """Where the indexes disagree with what they index (empty: nowhere)."""
        found = []
        mine_on: dict[str, dict[str, Request]] = {}
        for holder, (worker, request) in self.holdings.items():
            mine_on.setdefault(worker, {})[holder] = request
        if mine_on != self._mine_on:
            found.append(f"the ledger's holders per worker are {self._mine_on}, not {mine_on}")
        counted = {w: (self.count_on(w), w) for w in self.capacity}
        if self._fewest.keys() != counted:
            found.append(f"the ledger orders workers by {self._fewest.keys()}, not {counted}")
        return found

    def add_worker(self, worker: str, resources: Mapping[str, float]) -> None:
        self.capacity[worker] = {k: float(v) for k, v in resources.items()}
        self._recount(worker)

    def remove_worker(self, worker: str) -> list[str]:
        """Forget a worker; returns the holders that were on it (now released)."""
        self.capacity.pop(worker, None)
        self.others.pop(worker, None)
        lost = list(self._mine_on.pop(worker, {}))
        for holder in lost:
            del self.holdings[holder]
        self._recount(worker)
        return lost

    def held_on(self, worker: str) -> Request:
        """What this engine and the others hold on ``worker``."""
        requests = list(self._mine_on.get(worker, {}).values())
        requests += [r for h, r in self.others.get(worker, {}).items() if h not in self.holdings]
        total: Request = {}
        for request in requests:
            for name, amount in request.items():
                total[name] = total.get(name, 0.0) + amount
        return total

    def free(self, worker: str) -> Request:
        held = self.held_on(worker)
        return {k: v - held.get(k, 0.0) for k, v in self.capacity.get(worker, {}).items()}

    def count_on(self, worker: str) -> int:
        """Things held on ``worker``, by this engine and the others."""
        mine = len(self._mine_on.get(worker, ()))
        return mine + sum(1 for h in self.others.get(worker, {}) if h not in self.holdings)

    def describe(self, names: Mapping[str, str] = {}) -> str:  # noqa: B006 - read only
        """One line per worker: what it declares, what is free, and who holds the rest
        (this engine's holders by their ``names``, other engines' counted), for errors."""
        if not self.capacity:
            return "  (no workers)"
        lines = []
        for worker in sorted(self.capacity):
            mine = [names.get(h, h) for h in self._mine_on.get(worker, {})]
            others = [h for h in self.others.get(worker, {}) if h not in self.holdings]
            holders = ", ".join(sorted(mine)) or "nothing of this engine's"
            if others:
                holders += f"; {len(others)} of other engines'"
            lines.append(
                f"  {worker}: declares {shown(self.capacity[worker])}, free "
                f"{shown(self.free(worker))}, held by {holders}"
            )
        return "\n".join(lines)

    def check(self, request: Mapping[str, float]) -> None:
        """Raise :class:`ResourceError` if no worker could ever meet ``request``."""
        check_satisfiable(request, self.capacity)

    def choose(
        self,
        request: Mapping[str, float],
        strategy: str = "spread",
        exclude: Iterable[str] = (),
        avoid: Iterable[str] = (),
    ) -> str | None:
        """The worker to place ``request`` on now, or ``None`` if none has room.

        Workers in ``exclude`` are never taken; those in ``avoid`` only when no
        other has room.
        """
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
        excluded = set(exclude)
        if not request and strategy == "spread":  # it fits everywhere: the kept order
            return self._fewest.first(excluded | set(avoid)) or self._fewest.first(excluded)
        return self.choose_by_looking(request, strategy, excluded, avoid)

    def choose_by_looking(
        self,
        request: Mapping[str, float],
        strategy: str = "spread",
        exclude: Iterable[str] = (),
        avoid: Iterable[str] = (),
    ) -> str | None:
        """`choose`, by a look at every worker (what any request needs)."""
        excluded = set(exclude)
        candidates = [w for w in self.capacity if w not in excluded and fits(request, self.free(w))]
        preferred = [w for w in candidates if w not in set(avoid)]
        candidates = preferred or candidates
        if not candidates:
            return None

        def room(worker: str) -> float:
            free = self.free(worker)
            return sum(free.get(name, 0.0) for name in request) if request else 0.0

        if strategy == "spread":
            return min(candidates, key=lambda w: (self.count_on(w), -room(w), w))
        return min(candidates, key=lambda w: (-self.count_on(w), room(w), w))

    def acquire(self, holder: str, worker: str, request: Mapping[str, float]) -> None:
        if holder in self.holdings:
            raise KeyError(f"{holder!r} already holds resources")
        self.holdings[holder] = (worker, dict(request))
        self._mine_on.setdefault(worker, {})[holder] = self.holdings[holder][1]
        self._recount(worker)

    def release(self, holder: str) -> tuple[str, Request] | None:
        held = self.holdings.pop(holder, None)
        if held is not None:
            self.released.add(holder)
            mine = self._mine_on.get(held[0], {})
            mine.pop(holder, None)
            if not mine:
                self._mine_on.pop(held[0], None)
            self._recount(held[0])
        return held
