"""Which addresses a broker forwards to: peer URLs normalised, the configured list, loopback."""

from __future__ import annotations

import pytest

import s3q


def test_which_addresses_a_broker_forwards_to(caplog: pytest.LogCaptureFixture) -> None:
    from s3q.broker.forward import Peers
    from s3q.wire.peers import normalize

    assert (
        normalize("HTTP://Node-A:8765/")
        == normalize("http://node-a:8765")
        == ("http://node-a:8765")
    )
    assert normalize("http://node-a") == "http://node-a:80"
    assert normalize("https://[::1]/base/") == "https://[::1]:443/base"
    listed = Peers("token", ["http://node-a:8765/", "https://NODE-B"])
    assert listed.allows("http://node-a:8765") and listed.allows("https://node-b:443/")
    assert not listed.allows("http://node-a:8766") and not listed.allows("http://node-b")
    assert not listed.allows("http://127.0.0.1:8765") and not listed.allows("not a url")
    assert not Peers("token").allows("http://127.0.0.1:8765")  # tokens, no list: no one
    tokenless = Peers(None)  # no tokens, no list: this machine only
    assert tokenless.allows("http://127.0.0.1:8765") and tokenless.allows("http://localhost:1")
    assert tokenless.allows("http://[::1]:8765") and not tokenless.allows("http://10.0.0.1:80")
    with caplog.at_level("WARNING", logger="s3q.broker"):
        error = listed.refuse("jobs", "http://10.0.0.1:80")
        assert listed.refuse("jobs", "http://10.0.0.1:80") is not error
    assert isinstance(error, s3q.Unavailable)
    assert "'http://10.0.0.1:80', which is not a configured peer" in str(error)
    [warning] = caplog.records  # once a minute for each address
    assert "not a configured peer" in warning.getMessage()
    with pytest.raises(s3q.Unavailable, match="not a configured peer"):
        listed.queue("http://10.0.0.1:80", "jobs")  # never a connection to it
