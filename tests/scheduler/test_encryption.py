"""Whether an engine's cluster encrypts its connections (`Engine.encrypted`)."""

import dask

from hrl_tasks.scheduler import SyncEngine
from hrl_tasks.scheduler.engine_cluster import requires_encryption


def test_a_cluster_is_encrypted_by_its_security_its_configuration_or_its_scheme():
    assert requires_encryption(True, False, "tcp://10.0.0.5:8786")
    assert requires_encryption(False, True, "tcp://10.0.0.5:8786")
    assert requires_encryption(False, False, "tls://10.0.0.5:8786")
    assert not requires_encryption(False, False, "tcp://127.0.0.1:8786")
    assert not requires_encryption(False, False, "inproc://10.0.0.5/1/2")


def test_an_engine_in_one_process_is_not_encrypted_and_sends_nothing():
    with dask.config.set({"distributed.comm.require-encryption": True}), SyncEngine() as engine:
        assert engine.encrypted is False
        assert engine.runner is None
