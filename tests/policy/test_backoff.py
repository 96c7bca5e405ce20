"""set_testing: a plain call sets the switch; ``with set_testing(...)`` restores the state before."""

from __future__ import annotations

import pytest

import agentkit
from agentkit.policy.backoff import Backoff


def switch_is_on() -> bool:
    """Whether the switch is on, seen from what it controls: a delay that is 0 only when on."""
    return Backoff(base=1.0, cap=1.0).delay(1) == 0.0


def test_plain_call_sets_the_switch_for_good():
    agentkit.set_testing(False)
    assert not switch_is_on()
    agentkit.set_testing(True)
    assert switch_is_on()
    agentkit.set_testing(False)
    agentkit.set_testing()  # the default is True
    assert switch_is_on()


def test_context_manager_restores_the_previous_state():
    agentkit.set_testing(False)
    with agentkit.set_testing(True) as mode:
        assert switch_is_on()
        assert mode.testing is True and mode.previous is False
    assert not switch_is_on()

    agentkit.set_testing(True)
    with agentkit.set_testing(False):
        assert not switch_is_on()
    assert switch_is_on()


def test_nested_blocks_unwind_in_order():
    agentkit.set_testing(False)
    with agentkit.set_testing(True):
        with agentkit.set_testing(False):
            assert not switch_is_on()
        assert switch_is_on()
    assert not switch_is_on()


def test_restores_when_the_block_raises():
    agentkit.set_testing(False)
    with pytest.raises(RuntimeError, match="boom"), agentkit.set_testing(True):
        assert switch_is_on()
        raise RuntimeError("boom")
    assert not switch_is_on()


def test_the_exception_is_not_swallowed():
    mode = agentkit.set_testing(True)
    assert mode.__exit__(KeyError, KeyError("k"), None) is None  # falsy: the error propagates
