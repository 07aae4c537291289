"""The worker pool shared by parallel collection and parallel online evaluation: every item handled once, by
a worker that reports its number; a worker that raises or dies is a WorkerError naming it."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from realissim.util.workers import Send, WorkerError, WorkerPool, serve


def _square_worker(number: int, fail_on: int | None, inbox: Any, outbox: Any) -> None:
    @contextmanager
    def session(send: Send) -> Iterator[Callable[[int], None]]:
        send("ready", os.getpid())

        def handle(item: int) -> None:
            if item == fail_on:
                raise ValueError(f"item {item} is bad")
            if item < 0:
                os._exit(3)  # dies without a word
            send("done", (item, item * item))

        yield handle

    serve(number, inbox, outbox, session)


def _drain(pool: WorkerPool, wanted: int, ready: int = 0) -> list[tuple[str, int, Any]]:
    messages: list[tuple[str, int, Any]] = []
    deadline = time.monotonic() + 60.0
    while sum(m[0] == "done" for m in messages) < wanted or sum(m[0] == "ready" for m in messages) < ready:
        assert time.monotonic() < deadline, f"no end after 60 s: {messages}"
        message = pool.receive(timeout=0.5)
        if message is not None:
            messages.append(message)
    return messages


def test_every_item_is_handled_once_by_a_numbered_worker() -> None:
    pool = WorkerPool(_square_worker, (None,), 2, "square")
    pool.put(list(range(10)))
    pool.close_inbox()
    pool.close_inbox()  # idempotent: one None per worker
    try:
        pool.start()
        messages = _drain(pool, 10, ready=2)
    finally:
        pool.end(wait=True)
    done = sorted(payload for kind, _, payload in messages if kind == "done")
    assert done == [(i, i * i) for i in range(10)]
    ready = {number: pid for kind, number, pid in messages if kind == "ready"}
    assert ready == {0: pool.processes[0].pid, 1: pool.processes[1].pid}
    assert all(p.exitcode == 0 for p in pool.processes)  # each ended at its None
    with pytest.raises(RuntimeError, match="closed"):
        pool.put([11])


def test_a_worker_that_raises_is_reported_with_its_traceback() -> None:
    pool = WorkerPool(_square_worker, (4,), 1, "square")
    pool.put(list(range(6)))
    pool.close_inbox()
    try:
        pool.start()
        with pytest.raises(WorkerError, match=r"(?s)worker square-0 failed:.*ValueError: item 4 is bad"):
            _drain(pool, 6)
    finally:
        pool.end(wait=False)


def test_a_worker_that_dies_without_a_word_is_reported_with_its_exit_code() -> None:
    pool = WorkerPool(_square_worker, (None,), 1, "square")
    pool.put([1, -1, 2])
    pool.close_inbox()
    try:
        pool.start()
        with pytest.raises(WorkerError, match=r"worker square-0 ended \(exit code 3\)"):
            _drain(pool, 3)
    finally:
        pool.end(wait=False)
