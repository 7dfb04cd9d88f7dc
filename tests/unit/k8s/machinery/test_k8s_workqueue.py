"""proctor.k8s.machinery.workqueue: each key once in the queue, never processed twice at once, and
processed once more when added while it is processed."""

from __future__ import annotations

import asyncio

from proctor.k8s.machinery.workqueue import WorkQueue


async def test_keys_added_many_times_before_a_pass_make_one_pass() -> None:
    passes: list[str] = []

    async def process(key):
        passes.append(key)
    queue = WorkQueue(process, workers=2)
    for _ in range(5):
        queue.add("a")
    queue.add("b")
    await asyncio.sleep(0)
    await queue.idle()
    queue.stop()
    assert sorted(passes) == ["a", "b"]


async def test_a_key_added_during_its_pass_makes_one_more_pass_never_two_at_once() -> None:
    running, most, passes = 0, 0, 0
    started, release = asyncio.Event(), asyncio.Event()

    async def process(key):
        nonlocal running, most, passes
        running += 1
        most = max(most, running)
        passes += 1
        if passes == 1:
            started.set()
            await release.wait()
        running -= 1
    queue = WorkQueue(process, workers=4)
    queue.add("a")
    await asyncio.wait_for(started.wait(), 10)
    for _ in range(3):  # while the first pass runs: one more pass after it, not three
        queue.add("a")
    release.set()
    await queue.idle()
    queue.stop()
    assert (passes, most) == (2, 1)


async def test_a_failing_pass_does_not_stop_the_queue() -> None:
    passes: list[str] = []

    async def process(key):
        passes.append(key)
        if key == "bad":
            raise RuntimeError("refused")
    queue = WorkQueue(process, workers=1)
    queue.add("bad")
    queue.add("good")
    await asyncio.sleep(0)
    await queue.idle()
    queue.stop()
    assert passes == ["bad", "good"]


async def test_add_after_adds_when_its_delay_has_passed_not_before() -> None:
    # Ordering, not elapsed time: a key added now passes before keys added with a delay,
    # and those pass in the order of their delays, whatever order they were added in.
    passes: list[str] = []
    three = asyncio.Event()

    async def process(key):
        passes.append(key)
        if len(passes) == 3:
            three.set()
    queue = WorkQueue(process, workers=1)
    queue.add_after("later", 0.04)
    queue.add_after("sooner", 0.02)
    queue.add("now")
    await asyncio.wait_for(three.wait(), 10)
    await queue.idle()
    queue.stop()
    assert passes == ["now", "sooner", "later"]
