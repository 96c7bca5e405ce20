"""Tally (agentkit/policy/tally.py): a count that threads add to without a lock. ``add()`` is
one ``next`` of an ``itertools.count``; ``value`` takes one more number under a lock and
subtracts the reads, so reading never changes the count (docs/design.md#budget)."""

from __future__ import annotations

import threading

from agentkit.policy.tally import Tally

THREADS = 4
ADDS = 5_000  # per thread


def _together(work: list[threading.Thread]) -> None:
    for thread in work:
        thread.start()
    for thread in work:
        thread.join(10)
    assert not any(thread.is_alive() for thread in work)


def test_a_new_tally_is_zero_and_reading_it_does_not_count() -> None:
    tally = Tally()
    assert tally.value == 0
    assert tally.value == 0  # the number the first read took is not an add


def test_each_add_counts_one() -> None:
    tally = Tally()
    for _ in range(7):
        tally.add()
    assert tally.value == 7
    tally.add()
    assert tally.value == 8


def test_tallies_count_apart() -> None:
    one, other = Tally(), Tally()
    one.add()
    one.add()
    other.add()
    assert (one.value, other.value) == (2, 1)


def test_concurrent_adds_from_threads_started_together_are_all_counted() -> None:
    tally = Tally()
    start = threading.Barrier(THREADS)

    def adder() -> None:
        start.wait()
        add = tally.add
        for _ in range(ADDS):
            add()

    _together([threading.Thread(target=adder) for _ in range(THREADS)])
    assert tally.value == THREADS * ADDS


def test_reads_interleaved_with_adds_never_change_the_final_value() -> None:
    tally = Tally()
    start = threading.Barrier(THREADS + 1)
    adders_done = threading.Event()
    seen: list[int] = []

    def adder() -> None:
        start.wait()
        for _ in range(ADDS):
            tally.add()

    def reader() -> None:
        start.wait()
        while not adders_done.is_set():
            seen.append(tally.value)
        seen.append(tally.value)

    adders = [threading.Thread(target=adder) for _ in range(THREADS)]
    watcher = threading.Thread(target=reader)
    watcher.start()
    _together(adders)
    adders_done.set()
    watcher.join(10)
    assert not watcher.is_alive()
    assert len(seen) >= 1
    # every read saw a count that was really reached: never more than was added, never less
    # than an earlier read, and the reads themselves are never counted
    assert all(0 <= value <= THREADS * ADDS for value in seen)
    assert seen == sorted(seen)
    assert seen[-1] == THREADS * ADDS
    assert tally.value == THREADS * ADDS


def test_many_reads_then_adds_still_count_only_the_adds() -> None:
    tally = Tally()
    for _ in range(100):
        assert tally.value == 0
    tally.add()
    assert tally.value == 1


def test_repr_shows_the_count() -> None:
    tally = Tally()
    assert repr(tally) == "Tally(0)"
    tally.add()
    tally.add()
    tally.add()
    assert repr(tally) == "Tally(3)"
    assert repr(tally) == "Tally(3)"  # repr reads the value: it counts nothing
