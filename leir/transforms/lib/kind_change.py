"""What the steps that give one serial loop another kind share (``unroll``
makes it ``U``, ``vectorize`` makes it ``V``).

Such a step is offered on every loop the cursor selects that passes its
preconditions, is checked by raising the first one that fails, and is
applied by one TVM schedule primitive on the named loop. Each step module
keeps what is its own: its preconditions, as a function from a loop site to
the typed error of the first that fails (None when the step applies), and
its title.
"""

from __future__ import annotations

import sys
from typing import Callable

from leir import ast as A
from leir.transforms.applying import apply_transform
from leir.transforms.base import Candidate, Context, LoopSite, NotApplicable, Step, loop_arg, tvm_loop

def entry_points(step_id: str, refusal: Callable[[Context, LoopSite], NotApplicable | None],
                 title: Callable[[A.Loop], str], primitive: str) -> tuple[Callable, Callable, Callable]:
    """The ``candidates``, ``check`` and ``schedule`` of a step module:
    ``refusal`` gives the step's typed error on a loop site (None when it
    applies), ``title`` its title on a loop, ``primitive`` the TVM schedule
    method that applies it (``sch.unroll``)."""

    def candidates_(ctx: Context, at: int | None) -> list[Candidate]:
        """A step on each loop at ``at`` (all when None) that passes every precondition."""
        return [Candidate(Step(step_id, ctx.loop_ref(site)), title(site.loop), site.loop.span)
                for site in ctx.loops_at(at) if refusal(ctx, site) is None]

    def check_(ctx: Context, args: dict) -> None:
        """Raise the typed error of the first precondition the named loop fails."""
        error = refusal(ctx, loop_arg(ctx, args, step_id))
        if error is not None:
            raise error

    def schedule_(sch, ctx: Context, args: dict) -> None:
        """Apply the TVM primitive to the named loop."""
        getattr(sch, primitive)(tvm_loop(sch, args["block"], args["loop"]))

    return candidates_, check_, schedule_


def apply_step(step: str, program, block: str, loop: str):
    """Apply the step module named ``step`` (its ``__name__``) to loop
    ``loop`` around ``block`` and return the new program."""
    return apply_transform(step, program, Step(sys.modules[step].ID, {"block": block, "loop": loop}))
