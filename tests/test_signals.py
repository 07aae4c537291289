"""SIGTERM as an exception (`realissim.util.signals`): raised at once, or held through a deferring block."""

from __future__ import annotations

import os
import signal

import pytest

from realissim.util.signals import Terminated, terminate_deferred, terminate_raises


def test_sigterm_raises_at_once_or_when_the_deferring_block_ends() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Terminated) as raised, terminate_raises():
        os.kill(os.getpid(), signal.SIGTERM)  # Python runs the handler before the next line
        pytest.fail("SIGTERM did not raise")
    assert raised.value.code == 143
    steps = []
    with pytest.raises(Terminated), terminate_raises():
        with terminate_deferred():
            with terminate_deferred():  # nested: held until the outermost block ends
                os.kill(os.getpid(), signal.SIGTERM)
                steps.append("inner")
            steps.append("outer")  # still running: the signal is held
        steps.append("after")  # not reached
    assert steps == ["inner", "outer"]
    # the block's own error goes on; the held signal is dropped
    with pytest.raises(ValueError), terminate_raises(), terminate_deferred():
        os.kill(os.getpid(), signal.SIGTERM)
        raise ValueError("the block failed")
    assert signal.getsignal(signal.SIGTERM) == before  # the previous handler is back
