"""Where a batch runner's processes listen, and the TLS that guards them.

Under ``--runner`` every process of a run is started by the launcher on nodes
that other users share, so nothing listens on every interface and nothing
speaks plain TCP unless asked:

- **Where**: the scheduler's rank listens on ``--interface`` if given, else on
  the address of the interface its default route leaves by; every other rank
  on ``--interface``, else on the address of the interface that reaches the
  scheduler's host. The scheduler's dashboard listens there too; workers have
  none.
- **TLS**: the scheduler's rank makes a key and a self-signed certificate for
  this run only (as ``distributed.Security.temporary`` does) and hands them to
  the other ranks in a file readable by the user alone; every rank then
  requires TLS with it, as client, scheduler and worker (Dask's
  ``distributed.comm.tls.*`` and ``require-encryption``), so a client without
  the run's certificate is refused, and so is plain TCP. ``--no-tls`` opts out,
  with a warning.

What the ranks share (`RunNetwork`) is plain JSON; the functions here are pure
but for reading the host's interfaces and routes.
"""

from __future__ import annotations

import socket
from typing import NamedTuple

from hrl_tasks.scheduler.errors import EngineError

DEFAULT_ROUTE_PROBE = "203.0.113.1"  # any address off this host: only the route is asked
ROLES = ("scheduler", "worker", "client")  # one certificate serves all three


class RunNetwork(NamedTuple):
    """What the scheduler's rank tells the others: its host, and the run's key and
    certificate (None without TLS), as PEM text."""

    scheduler_host: str
    cert: str | None
    key: str | None


def interface_address(name: str) -> str:
    """The IPv4 address of the interface ``name``.

    Raises:
        EngineError: if this host has no such interface (or it has no IPv4 address),
            naming the ones it has.
    """
    import psutil

    interfaces = psutil.net_if_addrs()
    for address in interfaces.get(name, []):
        if address.family == socket.AF_INET:
            return address.address
    raise EngineError(
        f"--interface {name}: this host ({socket.gethostname()}) has no interface of that "
        f"name with an IPv4 address; it has {', '.join(sorted(interfaces))}"
    )


def interface_of(ip: str) -> str | None:
    """The name of the interface holding ``ip`` on this host, if any."""
    import psutil

    for name, addresses in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == ip for a in addresses):
            return name
    return None


def route_source(host: str) -> str | None:
    """This host's address on the interface that reaches ``host`` (the kernel's
    route; no packet is sent), or None without a route."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((host, 9))
        except OSError:
            return None
        return probe.getsockname()[0]


def scheduler_host(interface: str | None) -> str:
    """Where the scheduler's rank listens: ``interface``'s address, else the
    address its default route leaves by, else loopback (a host with no route out
    can only run a one-node allocation)."""
    if interface is not None:
        return interface_address(interface)
    return route_source(DEFAULT_ROUTE_PROBE) or "127.0.0.1"


def rank_host(interface: str | None, scheduler: str) -> str:
    """Where any other rank listens: ``interface``'s address, else the address of
    the interface that reaches the ``scheduler``'s host.

    Raises:
        EngineError: if no route reaches it.
    """
    if interface is not None:
        return interface_address(interface)
    found = route_source(scheduler)
    if found is None:
        raise EngineError(
            f"no route from {socket.gethostname()} to the scheduler's rank at {scheduler}; "
            "name the interface that reaches it with --interface"
        )
    return found


def new_run_network(interface: str | None, tls: bool) -> RunNetwork:
    """What the scheduler's rank makes for its run: its host, and with ``tls`` a key
    and a certificate made now, for this run only."""
    host = scheduler_host(interface)
    if not tls:
        return RunNetwork(host, None, None)
    from distributed.security import Security

    made = Security.temporary()
    return RunNetwork(host, made.tls_ca_file, made.tls_scheduler_key)


def tls_settings(network: RunNetwork) -> dict:
    """Dask's configuration that makes every connection of this process require TLS
    with the run's certificate, in every role (empty without TLS). Pure."""
    if network.cert is None:
        return {}
    settings = {
        "distributed.comm.require-encryption": True,
        "distributed.comm.tls.ca-file": network.cert,
    }
    for role in ROLES:
        settings[f"distributed.comm.tls.{role}.cert"] = network.cert
        settings[f"distributed.comm.tls.{role}.key"] = network.key
    return settings


def run_security(network: RunNetwork):
    """The ``distributed.Security`` of the run (None without TLS)."""
    if network.cert is None:
        return None
    from distributed.security import Security

    keys = {}
    for role in ROLES:
        keys[f"tls_{role}_cert"] = network.cert
        keys[f"tls_{role}_key"] = network.key
    return Security(require_encryption=True, tls_ca_file=network.cert, **keys)


NO_TLS_WARNING = (
    "--no-tls: this run's scheduler and workers speak plain TCP on {host}; anyone who "
    "can reach that address can run code as you on every node of the run"
)
