"""Where a runner's ranks listen and the TLS settings they share, on this host's real
interfaces (no launcher)."""

import ssl

import psutil
import pytest

from hrl_tasks.scheduler import EngineError
from hrl_tasks.scheduler.runner_network import (
    RunNetwork,
    interface_address,
    interface_of,
    new_run_network,
    rank_host,
    run_security,
    scheduler_host,
    tls_settings,
)


def test_an_interface_is_named_by_its_address_and_back():
    assert interface_address("lo") == "127.0.0.1" and interface_of("127.0.0.1") == "lo"
    with pytest.raises(EngineError, match=r"--interface nosuch0: .* it has .*lo"):
        interface_address("nosuch0")


def test_every_rank_listens_where_it_reaches_the_scheduler():
    host = scheduler_host(None)
    assert host != "0.0.0.0" and interface_of(host) in psutil.net_if_addrs()
    assert rank_host(None, host) == host  # one host: the same interface
    assert rank_host(None, "127.0.0.1") == "127.0.0.1"
    assert scheduler_host("lo") == rank_host("lo", host) == "127.0.0.1"


def test_a_run_with_tls_requires_its_own_certificate_in_every_role():
    network = RunNetwork(*new_run_network("lo", tls=True))
    assert network.scheduler_host == "127.0.0.1" and "BEGIN CERTIFICATE" in network.cert
    settings = tls_settings(network)
    assert settings["distributed.comm.require-encryption"] is True
    for role in ("scheduler", "worker", "client"):
        assert settings[f"distributed.comm.tls.{role}.key"] == network.key
        context = run_security(network).get_connection_args(role)["ssl_context"]
        assert context.verify_mode == ssl.CERT_REQUIRED
    other = RunNetwork(*new_run_network("lo", tls=True))
    assert other.cert != network.cert  # made for each run
    plain = RunNetwork(*new_run_network("lo", tls=False))
    assert plain.cert is None and tls_settings(plain) == {} and run_security(plain) is None
