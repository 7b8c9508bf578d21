"""CPU threading rule: one live thread at a time runs PyTorch's multi-threaded CPU kernels.

PyTorch's CPU thread pool is libgomp's. libgomp keeps a team of worker threads for every thread
that has run a parallel region, for as long as that thread lives, and once the process holds
more such workers than it has CPUs it stops letting them spin between regions: each of the
~120 parallel regions of a decode step then pays a sleep/wake. On the 2-core dev machine a
1-token SmolLM2-135M forward on the engine's round thread took 32 ms instead of 19 ms as soon as
the main thread (which had loaded the model) or an idle second engine thread had ever run torch
work; with the main thread kept serial it took 19 ms, and a thread that has exited frees its
team.

So processes that serve or benchmark keep their main thread serial (``serial_main_thread``
before any torch work), the engine's round thread takes the real thread count
(``EngineConfig.threads``), and other multi-threaded work runs on a short-lived thread
(``run_on_compute_thread``). Tests and scripts that compute on the main thread need none of it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import TypeVar

import torch

T = TypeVar("T")


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask, not the host's count)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def use_threads(threads: int) -> None:
    """Set the calling thread's intra-op thread count (0: every available CPU)."""
    torch.set_num_threads(threads if threads > 0 else available_cpus())


def serial_main_thread() -> int:
    """Make the calling (main) thread run torch work on one thread from now on and return the
    thread count it had: the count the compute thread should take."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    return threads


def run_on_compute_thread(fn: Callable[..., T], *args: object, threads: int = 0,
                          **kwargs: object) -> T:
    """Run ``fn`` on a fresh thread with ``threads`` intra-op threads and return its result
    (its exception is re-raised here); the thread exits, and its libgomp team with it."""
    result: list[T] = []
    error: list[BaseException] = []

    def body() -> None:
        use_threads(threads)
        try:
            result.append(fn(*args, **kwargs))
        except BaseException as exc:  # handed to the caller
            error.append(exc)

    thread = threading.Thread(target=body, name="specd-compute")
    thread.start()
    thread.join()
    if error:
        raise error[0]
    return result[0]
