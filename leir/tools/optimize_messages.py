"""The messages between the editor's process and an optimize search running
in a process of its own (``leir.tools.jobs.optimize_child``), over a
``multiprocessing`` pipe. Each is a frozen dataclass (pickled as such), so
both ends match on types, never on the position of a field in a tuple.

The search sends a ``MeasureRequest`` or a ``PairedRequest`` and waits for
its answer (``Timings``, ``PairedTimes``, or ``Cancel``: stop now); it sends
``Progress`` as it goes and ``StepKept`` for each step it keeps, and ends
with ``Done`` or ``Failed``. Nothing here imports TVM or NumPy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Union

if TYPE_CHECKING:
    from leir.tools.jobs import Failure

# ------------------------------------------------------------ from the search


@dataclass(frozen=True)
class MeasureRequest:
    """Time each program (canonical LEIR text); answered by ``Timings``."""

    programs: list[str]


@dataclass(frozen=True)
class PairedRequest:
    """Time two programs turn about, ``rounds`` rounds, without the cache;
    answered by ``PairedTimes``."""

    before: str
    after: str
    rounds: int


@dataclass(frozen=True)
class Progress:
    """What the search is doing, in words."""

    text: str


@dataclass(frozen=True)
class StepKept:
    """A step the search kept, as its trajectory record
    (``TrajectoryStep.to_json``), and the program after it."""

    step: dict
    program: str


@dataclass(frozen=True)
class Done:
    """The search's result (``Result.to_json``): the last message."""

    result: dict


@dataclass(frozen=True)
class Failed:
    """The search could not run, or was cancelled: the last message."""

    failure: "Failure"


FromSearch = Union[MeasureRequest, PairedRequest, Progress, StepKept, Done, Failed]

# ------------------------------------------------------------ to the search


@dataclass(frozen=True)
class Timings:
    """The answer to a ``MeasureRequest``: ``(ms, error, cached)`` per
    program, in its order (``leir.tools.jobs.timing_json``)."""

    timings: list[tuple]


@dataclass(frozen=True)
class PairedTimes:
    """The answer to a ``PairedRequest``: each program's runs and per-round
    figures (ms), or the ``error`` that stopped the comparison."""

    before_runs: tuple = ()
    after_runs: tuple = ()
    before_rounds: tuple = ()
    after_rounds: tuple = ()
    error: str | None = None


@dataclass(frozen=True)
class Cancel:
    """The answer to either request when the search is to stop now."""


ToSearch = Union[Timings, PairedTimes, Cancel]
