"""The renewal of budget holds (remem.usage._holds.Renewals): one thread renews every hold of a gate."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable

from remem.usage._holds import RENEW_FOR, Renewals


def _renewal_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name == "remem-hold-renewal" and t.is_alive())


def test_many_holds_are_renewed_by_one_thread_until_each_is_stopped() -> None:
    renewed: Counter[str] = Counter()
    changed = threading.Condition()

    def renew(hold: str) -> None:
        with changed:
            renewed[hold] += 1
            changed.notify_all()

    def until(done: Callable[[], bool]) -> None:
        with changed:
            assert changed.wait_for(done, timeout=30)

    renewals = Renewals(renew, seconds=0.2)
    before = _renewal_threads()
    holds = [f"h{i}" for i in range(20)]
    for hold in holds:
        renewals.start(hold)
    assert _renewal_threads() == before + 1  # one thread for the gate, not one per hold
    until(lambda: all(renewed[h] >= 2 for h in holds))
    for hold in holds[:10]:
        renewals.stop(hold)
    with changed:
        at_stop = dict(renewed)
    until(lambda: all(renewed[h] >= at_stop[h] + 2 for h in holds[10:]))  # the others go on
    for hold in holds[:10]:
        assert renewed[hold] <= at_stop[hold] + 1  # a stopped hold at most once more (taken before the stop)
    for hold in holds[10:]:
        renewals.stop(hold)


def test_a_hold_never_stopped_is_renewed_for_renew_for_lifetimes_then_the_thread_ends() -> None:
    renewed: Counter[str] = Counter()
    renewals = Renewals(lambda hold: renewed.update([hold]), seconds=0.04)
    renewals.start("forgotten")
    thread = renewals._thread
    assert thread is not None
    thread.join(60)  # it ends once no hold is left for a quarter of the hold's lifetime
    assert not thread.is_alive()
    assert renewed["forgotten"] == 4 * RENEW_FOR
    renewals.start("next")  # a new hold starts a new thread
    assert renewals._thread is not None and renewals._thread.is_alive()
    renewals.stop("next")
