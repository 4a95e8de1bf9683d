"""One update spread over several learner processes, equal to the update on the whole batch.

Each learner holds the same policy (weights, optimizer and random generator) and
computes the loss on its share of the batch. A policy's loss is a mean over
rows, so the whole batch's gradient is ``sum_i n_i g_i / sum_i n_i``: one
all-reduce of the gradients weighted by rows, before clipping, after which every
learner takes the same optimizer step. What else a loss reads of the whole batch
comes from the same all-reduce: advantage statistics (`moments`), early-stop
diagnostics (`mean`), and random draws made for the whole batch and sliced
(`randn`), so that two learners give the update one learner would.

`split_rows` is the pure part; `DataParallel` wraps a gloo process group
(``torch.distributed``), joined through a ``TCPStore`` whose address the
learner group passes around (`hrl_tasks.rollout.learner_group`). The store and
each learner's gloo connections listen on the address given (the learner's
worker's), never on every interface: on an embedded cluster, the loopback only.
"""

from __future__ import annotations

import datetime
import socket
import time
from collections.abc import Sequence

import torch

GROUP_TIMEOUT_S = 120.0
"""How long a collective waits for a peer that neither answers nor closes its
connection (a peer that dies closes it: the others fail at once)."""


def split_rows(n_rows: int, parts: int, unit: int = 1, allow_empty: bool = False) -> list[slice]:
    """Contiguous shares of ``n_rows`` rows for ``parts`` learners, cut at multiples
    of ``unit`` (whole sequences), as even as the units allow. Pure.

    Raises:
        ValueError: If the rows are not whole units, or (unless ``allow_empty``)
            too few for a unit each.
    """
    if unit < 1 or n_rows % unit:
        raise ValueError(f"a batch of {n_rows} rows is not whole sequences of {unit} rows")
    units = n_rows // unit
    if units < parts and not allow_empty:
        raise ValueError(
            f"a batch of {units} sequence(s) of {unit} rows cannot give each of {parts} "
            f"learners a share: use a train_batch_size of at least {parts * unit} rows "
            "or fewer learners"
        )
    base, extra = divmod(units, parts)
    bounds = [0]
    for i in range(parts):
        bounds.append(bounds[-1] + (base + (i < extra)) * unit)
    return [slice(bounds[i], bounds[i + 1]) for i in range(parts)]


def gloo_options(host: str):
    """Options of a gloo process group whose connections listen on ``host`` only.

    Gloo's default device listens on the address the machine's hostname resolves
    to (or on the interface ``GLOO_SOCKET_IFNAME`` names, for the whole process).
    """
    import torch.distributed as dist

    # Why: a gloo group takes its devices only through these private options (torch's
    # own tests build groups so); the public way is GLOO_SOCKET_IFNAME, an interface
    # name for every group of the process. Public replacement: none.
    options = dist.ProcessGroupGloo._Options()  # noqa: SLF001
    options._timeout = datetime.timedelta(seconds=GROUP_TIMEOUT_S)  # noqa: SLF001
    options._devices = [dist.ProcessGroupGloo.create_device(hostname=host)]  # noqa: SLF001
    return options


class DataParallel:
    """A learner's membership in a group of ``world`` learners (rank ``rank``).

    Args:
        host, port: the group's ``TCPStore`` (rank 0 serves it: `serve_store`).
        rank, world: this learner's place and the group's size.
        store: rank 0's own store, kept alive while the group lives.
        local_host: the address this learner's gloo connections listen on (that of
            its worker; default ``host``).
    """

    def __init__(
        self, host: str, port: int, rank: int, world: int, store=None, local_host: str | None = None
    ) -> None:
        import torch.distributed as dist

        timeout = datetime.timedelta(seconds=GROUP_TIMEOUT_S)
        if store is None:
            store = dist.TCPStore(host, port, world, False, timeout=timeout)
        self.store = store
        self.group = dist.ProcessGroupGloo(store, rank, world, gloo_options(local_host or host))
        self.rank, self.world = rank, world
        self.share: slice | None = None  # this learner's rows of the batch in hand
        self.total_rows = 0
        self.reduce_s = 0.0  # spent in all-reduces (waiting for peers included)

    @staticmethod
    def serve_store(host: str, world: int):
        """Rank 0's ``TCPStore`` on a free port of ``host``, listening there only;
        returns ``(store, port)``.

        A ``TCPStore`` that opens its own socket listens on every interface whatever
        its host: it is handed a socket bound to ``host`` instead (and owns it).
        """
        import torch.distributed as dist

        family = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM)[0][0]
        listener = socket.create_server((host, 0), family=family)
        port = int(listener.getsockname()[1])
        timeout = datetime.timedelta(seconds=GROUP_TIMEOUT_S)
        store = dist.TCPStore(
            host,
            port,
            world,
            True,
            timeout=timeout,
            wait_for_workers=False,
            master_listen_fd=listener.detach(),
        )
        return store, port

    def set_share(self, share: slice, total_rows: int) -> None:
        """The rows of the whole batch this learner's loss reads (`randn` slices them)."""
        self.share, self.total_rows = share, int(total_rows)

    def _all_sum(self, flat: torch.Tensor) -> torch.Tensor:
        start = time.perf_counter()
        self.group.allreduce([flat]).wait()
        self.reduce_s += time.perf_counter() - start
        return flat

    def average_gradients(self, params: Sequence[torch.Tensor], rows: int) -> None:
        """Replaces each parameter's gradient (of a mean over ``rows`` rows) by the
        mean over all learners' rows. Parameters without a gradient stay so (every
        learner has the same ones)."""
        grads = [p.grad for p in params if p.grad is not None]
        flat = torch.cat(
            [g.reshape(-1) * float(rows) for g in grads]
            + [torch.tensor([rows], dtype=torch.float32)]
        )
        flat = self._all_sum(flat)
        flat = flat[:-1] / flat[-1]
        offset = 0
        for g in grads:
            g.copy_(flat[offset : offset + g.numel()].view_as(g))
            offset += g.numel()

    def mean(self, value: torch.Tensor, rows: int) -> torch.Tensor:
        """The mean over all learners of a per-row mean ``value`` over ``rows`` rows."""
        flat = self._all_sum(
            torch.stack([value.detach().float() * rows, torch.tensor(float(rows))])
        )
        return flat[0] / flat[1]

    def moments(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and population std of ``x``'s entries over all learners."""
        x = x.detach()
        flat = self._all_sum(torch.stack([x.sum(), (x * x).sum(), torch.tensor(float(x.numel()))]))
        mean = flat[0] / flat[2]
        var = (flat[1] / flat[2] - mean * mean).clamp_min(0.0)
        return mean, var.sqrt()

    def randn(self, shape: Sequence[int], generator: torch.Generator) -> torch.Tensor:
        """Normal noise for this learner's rows, drawn for the whole batch (the draw a
        single learner makes) and sliced: leading axis = rows of the batch."""
        shape = tuple(shape)
        whole = torch.randn((self.total_rows, *shape[1:]), generator=generator)
        return whole[self.share]

    def my_rows(self, rows: torch.Tensor | None, n_rows: int) -> torch.Tensor:
        """This learner's part of a minibatch's row indices (None: every row)."""
        if rows is None:
            rows = torch.arange(n_rows)
        return rows[split_rows(len(rows), self.world, allow_empty=True)[self.rank]]

    def close(self) -> None:
        """Leaves the group (the process group and store go with the last reference)."""
        self.group = None
        self.store = None
