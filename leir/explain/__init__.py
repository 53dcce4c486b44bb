"""Facts about loops, accesses and the machine, and the reasoning for one
transformation step built from them.

Modules: ``facts`` (strides, footprints, working sets, loop and access
facts), ``machine`` (caches, vectors, cores), ``reasoning`` (one step's
sentences), ``grounding`` (``check``: whether sentences about a step, a
model's, state only its facts), ``prediction`` (``predicted_after``: the program a simple step
makes, without TVM), ``markdown`` (hover text). Import from the
package.

Everything here is computed from the syntax tree and the semantic analysis
(``leir.semantics.Analysis``): nothing is lowered, compiled or run, and TVM
and the measurement engine are not imported, so hover can call it on every
request (listing the steps legal on a loop may enumerate a small iteration
space with NumPy, as the checker does). Every sentence of a ``Reasoning`` states a value that is also
in its ``facts`` dictionary; a fact the analysis cannot compute (a stride
through ``//``, a cache size the OS does not report) is said to be unknown or
assumed, never guessed.

API (what the language server's hover and the dataset builder call)::

    from leir.explain import (Machine, loop_facts, access_facts, step_reasoning,
                              describe_loop, describe_access, describe_step)

    machine = Machine.detect()            # this CPU; or Machine(l1d=32768, ...) in tests
    facts = loop_facts(analysis, at=offset)            # the loop whose header holds offset
    facts = loop_facts(analysis, block="C", var="k")   # or named like a step names it
    facts = access_facts(analysis, at=offset)          # the tensor access under the cursor
    r = step_reasoning(before, after, step, measured=(41.2, 7.9), target="llvm", machine=machine)
    r.sentences, r.facts, r.text

    describe_loop(analysis, at=offset)        # markdown, or None when no loop header is there
    describe_access(analysis, at=offset)      # markdown, or None when no access is there
    describe_step(before, step, after=after, measured=(41.2, 7.9))   # markdown
    predicted_after(before, step)         # the program after a split/tile/reorder/kind change, without TVM

``before`` and ``after`` are analyses of the program before and after the
step (``leir.semantics.analyze(leir.transforms.apply(before, step))``);
``describe_step`` without ``after`` predicts it with ``predicted_after`` where
that is exact (split, tile, reorder, parallelize, vectorize, unroll) and
otherwise shows the facts of the loops the step names.

Definitions used throughout (and in docs/reasoning.md):

- *stride* of an access along a loop: how many elements the accessed address
  moves when that loop's variable advances by one (row-major layout); 0 when
  the loop does not index it; through ``//`` and ``%`` by constants it is
  evaluated over one period; unknown when it is not one constant.
- *footprint* of an access over a set of loops: the number of distinct
  elements it touches while those loops run, per dimension the smaller of the
  index's range and the product of the extents that move it (exact for
  affine indices of one variable per dimension, an upper bound otherwise).
- *working set* of one iteration of a loop: the bytes of the cache lines
  (64 bytes unless the machine says otherwise) holding the elements the
  loops inside it touch, over every equation under it (a column of a
  row-major matrix costs a line per element).
- *reuse loop* of an access: the innermost enclosing loop (of more than one
  iteration) that does not index it; the element is touched again on the next
  iteration of that loop, after the working set of one iteration of it has
  gone through the cache in between (its *reuse distance*).
- *operations*: arithmetic operators and function calls of each right-hand
  side times the iterations of its loops (guards not subtracted).
- *arithmetic intensity*: operations per byte of the inputs and outputs
  (each read or written once: the least traffic any schedule needs).
"""

from leir.explain.facts import (
    AccessFacts,
    AccessStride,
    LoopAccess,
    LoopFacts,
    Refusal,
    access_facts,
    access_strides,
    compulsory_bytes,
    dtype_bytes,
    footprint,
    human_bytes,
    human_count,
    loop_facts,
    operations,
    program_operations,
    working_set,
)
from leir.explain.grounding import Dropped, GroundingResult, StepFacts, check, sentences, step_facts
from leir.explain.machine import Machine
from leir.explain.markdown import describe_access, describe_loop, describe_step
from leir.explain.prediction import predicted_after
from leir.explain.reasoning import NOISE, Reasoning, step_reasoning, unmeasured

__all__ = [
    "NOISE", "AccessFacts", "AccessStride", "Dropped", "GroundingResult", "LoopAccess", "LoopFacts", "Machine",
    "Reasoning", "Refusal", "StepFacts", "access_facts", "check", "access_strides", "compulsory_bytes", "describe_access", "describe_loop", "describe_step",
    "dtype_bytes", "footprint", "human_bytes", "human_count", "loop_facts", "operations", "predicted_after",
    "program_operations", "sentences", "step_facts", "step_reasoning", "unmeasured", "working_set",
]
