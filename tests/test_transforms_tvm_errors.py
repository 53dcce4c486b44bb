"""TVM refusals that are not ``ScheduleError``s become ``TvmRefused``
(``leir.transforms.applying._apply_schedule``); a bug in our own schedule code stays a
bug. TVM 0.27 with apache-tvm-ffi raises a failed ``ICHECK`` as a plain
``ValueError``, a missing map key as ``KeyError`` and its Python wrappers'
argument checks as ``TypeError``: each is triggered here with a real TVM
call, through a stand-in transformation whose ``schedule`` makes it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from leir.bridge.document import load_leir
from leir.transforms import Step
from leir.transforms.applying import _apply_schedule
from leir.transforms.base import Context, TvmRefused

pytestmark = pytest.mark.slow  # lowers with TVM

MATMUL = "L^{16}_{i} L^{24}_{j} L^{32}_{k} [ C_{i,j} += X_{i,k}*W_{k,j}; ];"


def apply_with(schedule):
    ctx = Context(load_leir(MATMUL).analysis)
    return _apply_schedule(SimpleNamespace(ID="probe", schedule=schedule), ctx, Step("probe", {}))


def loops(sch):
    return sch.get_loops(sch.get_sblock("C"))


def test_a_schedule_error_is_refused_with_its_message():
    with pytest.raises(TvmRefused) as e:
        apply_with(lambda sch, ctx, args: sch.vectorize(loops(sch)[2]))  # a reduction loop
    assert e.value.short.startswith('TVM refused probe: The "vectorize" cannot be fulfilled')


def test_a_failed_tvm_check_is_refused_without_its_check_text():
    with pytest.raises(TvmRefused) as e:
        apply_with(lambda sch, ctx, args: sch.fuse())
    assert e.value.short == "TVM refused probe: 'fuse' requires at least 1 loop(s)"


def test_a_key_error_inside_tvm_is_refused_and_named():
    with pytest.raises(TvmRefused) as e:
        apply_with(lambda sch, ctx, args: sch.transform_layout(sch.get_sblock("C"), ("read", 0), lambda i, j: [i]))
    assert e.value.short == "TVM refused probe: KeyError: 'key is not in Map'"


def test_tvms_argument_checks_are_refusals():
    with pytest.raises(TvmRefused) as e:
        apply_with(lambda sch, ctx, args: sch.split(loops(sch)[0], factors=[None, 2.5]))
    assert e.value.short.startswith('TVM refused probe: TypeError: In "Schedule.split", "factors[1]" has wrong type')


def test_a_bug_in_our_schedule_code_is_not_called_a_refusal():
    def broken(sch, ctx, args):
        return args["missing"]  # a KeyError raised here, not in TVM

    with pytest.raises(KeyError):
        apply_with(broken)
