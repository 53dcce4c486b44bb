"""One sample of the dataset: a program, the one step taken, what it gave,
whether it was verified, what it measured, and why.

A sample is one line of ``samples.jsonl``: a JSON object with the fields of
``FIELDS`` (``validate`` checks them). Every measured candidate of a state is
a sample, not only the step the trajectory went on with (``chosen``): the
steps the policy did not take, slower ones included, are data too.

- ``workload``: the file name (``matmul.leir``); ``variant``: ``"orig"`` or
  ``"v1"``...; ``variant_sizes``: old extent -> new extent;
- ``trajectory``: ``workload/variant/t<k>`` for a walk,
  ``workload/variant/plan<k>`` or ``workload/variant/db<k>`` for a teacher
  trajectory (a plan of ``leir.tools.plans``, a MetaSchedule record's
  trace); ``step_index``: 0 for a step from the start program; ``chosen``:
  the trajectory continued from this sample's ``after``; ``policy``
  (``POLICIES``): ``"exploit"`` (the fastest verified candidate),
  ``"explore"`` (a seeded random pick among the verified ones),
  ``"teacher"`` (the next step of an expert's trajectory: a plan or a
  translated MetaSchedule trace) for a chosen sample, else ``null``;
- ``before``, ``after``: canonical LEIR; ``leir apply --step STEP`` on a file
  holding ``before`` prints ``after``;
- ``step``: ``{"id", "args"}``, exactly what ``leir apply --step`` takes;
  ``strategy``: the step's id; ``steptp_strategy``: Step-TP's name for it (null where Step-TP has none);
- ``tensors``: the known tensors ``[{"name", "role", "dtype", "shape"}]``;
- ``verified`` and ``verification``: the method, seeds, worst errors and the
  tolerances they were held to (``leir.bridge.run``: Step-TP's);
- ``latency_before_ms``, ``latency_after_ms``: medians; ``*_min_ms``,
  ``*_max_ms``, ``*_spread`` and ``runs`` beside them; ``speedup``: before /
  after (below 1: the step made it slower); ``None`` where the after program
  has no latency (``error`` says why);
- ``target``, ``device``; ``reasoning`` (text), ``reasoning_facts``.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

#: Field name -> allowed JSON types (``None`` where the value may be null).
FIELDS: dict[str, tuple] = {
    "id": (str,),
    "workload": (str,),
    "variant": (str,),
    "variant_sizes": (dict,),
    "trajectory": (str,),
    "step_index": (int,),
    "chosen": (bool,),
    "policy": (str, type(None)),
    "before": (str,),
    "step": (dict,),
    "strategy": (str,),
    "steptp_strategy": (str, type(None)),
    "after": (str,),
    "tensors": (list,),
    "verified": (bool,),
    "verification": (dict,),
    "latency_before_ms": (float,),
    "latency_before_min_ms": (float,),
    "latency_before_max_ms": (float,),
    "latency_before_spread": (float,),
    "latency_after_ms": (float, type(None)),
    "latency_after_min_ms": (float, type(None)),
    "latency_after_max_ms": (float, type(None)),
    "latency_after_spread": (float, type(None)),
    "runs": (int,),
    "speedup": (float, type(None)),
    "target": (str,),
    "device": (str,),
    "reasoning": (str,),
    "reasoning_facts": (dict,),
    "error": (str, type(None)),
}

#: The values of ``policy`` for a chosen sample (``null`` for the others).
POLICIES = ("exploit", "explore", "teacher")

#: Keys of ``verification``.
VERIFICATION_FIELDS = ("method", "seeds", "max_abs_err", "max_rel_err", "mse", "criterion",
                       "rel_tolerance", "abs_tolerance", "mse_tolerance", "summary")


class RecordError(ValueError):
    """A sample that does not follow the schema."""


def sample_id(trajectory: str, step_index: int, step: dict) -> str:
    """Stable id of a sample: its trajectory, depth and step."""
    material = json.dumps([trajectory, step_index, step], sort_keys=True)
    return hashlib.sha256(material.encode()).hexdigest()[:16]


def validate(sample: dict[str, Any]) -> None:
    """Raise ``RecordError`` naming the first field that is missing or of the wrong type."""
    for name, types in FIELDS.items():
        if name not in sample:
            raise RecordError(f"missing field {name!r}")
        value = sample[name]
        if isinstance(value, bool) and bool not in types:
            raise RecordError(f"field {name!r} is a bool, expected {types}")
        if not isinstance(value, types):
            raise RecordError(f"field {name!r} is {type(value).__name__}, expected {[t.__name__ for t in types]}")
    if sample["policy"] is not None and sample["policy"] not in POLICIES:
        raise RecordError(f"field 'policy' is {sample['policy']!r}, expected one of {list(POLICIES)} or null")
    if sample["chosen"] != (sample["policy"] is not None):
        raise RecordError("a chosen sample has a policy, and only a chosen one")
    step = sample["step"]
    if set(step) != {"id", "args"} or not isinstance(step["args"], dict):
        raise RecordError("field 'step' must be exactly {\"id\", \"args\"}")
    missing = [k for k in VERIFICATION_FIELDS if k not in sample["verification"]]
    if missing:
        raise RecordError(f"verification lacks {missing}")
    if sample["verified"] and sample["latency_after_ms"] is None:
        raise RecordError("a verified sample has a measured latency after the step")


def dumps(sample: dict[str, Any]) -> str:
    """One line of ``samples.jsonl``."""
    return json.dumps(sample, ensure_ascii=False, sort_keys=False, allow_nan=False)
