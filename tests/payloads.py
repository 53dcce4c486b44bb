"""A corpus of Python files that try to run code, or to keep TVM busy,
when leir merely reads them.

Each entry is a file with the placeholders ``RUN`` (an expression that
creates the file ``MARKER`` when Python evaluates it) and ``RUN_STR`` (the
same expression as the text of a string, for the positions where TVM's
parser turns a string into code). ``files(directory)`` writes them with a
marker path of their own, so a test can tell which payload ran.

``LIVE`` names the payloads that do run under TVM's own parser
(``tvm.script.from_source``) when nothing screens them: the corpus's
positive control (``tests/test_payload_corpus.py`` checks it, so the
corpus cannot pass by holding only harmless text).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

#: Python that creates MARKER, with no name for TVM to rebind: builtins
#: reached through a literal's class (what a payload in a string does).
_REACH_OPEN = (
    "[c for c in ().__class__.__base__.__subclasses__() if c.__name__ == 'catch_warnings'][0]()"
    "._module.__builtins__['open']"
)
RUN = f"{_REACH_OPEN}('MARKER', 'w').close()"
RUN_STR = RUN.replace("'", "\\'")

HEADER = "from tvm.script import tirx as T\nfrom tvm.script import ir as I\n\n"


def _kernel(signature: str = 'A: T.Buffer((4,), "float32"), B: T.Buffer((4,), "float32")',
            body: str = "    for i in range(4):\n        B[i] = A[i]\n",
            decorator: str = "@T.prim_func(s_tir=True)", returns: str = "") -> str:
    return f"{HEADER}{decorator}\ndef f({signature}){returns}:\n{body}"


def _body(line: str) -> str:
    return _kernel(body=f"    {line}\n    for i in range(4):\n        B[i] = A[i]\n")


#: name -> file text (with RUN, RUN_STR and MARKER placeholders).
CORPUS: dict[str, str] = {
    # --- signature
    "buffer shape string": _kernel('A: T.Buffer(("RUN_STR",), "float32"), B: T.Buffer((4,), "float32")'),
    "buffer shape keyword string": _kernel('A: T.Buffer(shape=("RUN_STR",), dtype="float32"), B: T.Buffer((4,), "float32")'),
    "buffer shape call": _kernel('A: T.Buffer((RUN,), "float32"), B: T.Buffer((4,), "float32")'),
    "buffer dtype string": _kernel('A: T.Buffer((4,), "RUN_STR"), B: T.Buffer((4,), "float32")'),
    "buffer scope keyword": _kernel('A: T.Buffer((4,), "float32", scope=RUN), B: T.Buffer((4,), "float32")'),
    "parameter annotation call": _kernel('A: RUN, B: T.Buffer((4,), "float32")'),
    "parameter annotation string": _kernel('A: "RUN_STR", B: T.Buffer((4,), "float32")'),
    "return annotation": _kernel(returns=" -> RUN"),
    "return annotation string": _kernel(returns=' -> "RUN_STR"'),
    "default value": _kernel('A: T.Buffer((4,), "float32"), B: T.Buffer((4,), "float32"), n: T.int32 = RUN'),
    # --- decorators and module classes
    "decorator keyword": _kernel(decorator="@T.prim_func(s_tir=RUN)"),
    "decorator positional": _kernel(decorator="@T.prim_func(RUN)"),
    "foreign decorator": _kernel(decorator="@T.prim_func(s_tir=True)\n@(lambda f: RUN or f)"),
    "ir_module keyword": (
        f"{HEADER}@I.ir_module(check_well_formed=RUN)\nclass M:\n"
        '    @T.prim_func(s_tir=True)\n    def f(A: T.Buffer((4,), "float32")):\n        A[0] = T.float32(0)\n'
    ),
    "ir_module class body": (
        f"{HEADER}@I.ir_module\nclass M:\n    x = RUN\n\n"
        '    @T.prim_func(s_tir=True)\n    def f(A: T.Buffer((4,), "float32")):\n        A[0] = T.float32(0)\n'
    ),
    "ir_module metaclass": (
        f"{HEADER}@I.ir_module\nclass M(metaclass=RUN):\n"
        '    @T.prim_func(s_tir=True)\n    def f(A: T.Buffer((4,), "float32")):\n        A[0] = T.float32(0)\n'
    ),
    "ir_module function body": (
        f"{HEADER}@I.ir_module\nclass M:\n"
        '    @T.prim_func(s_tir=True)\n    def f(A: T.Buffer((4,), "float32")):\n        A[0] = T.float32(RUN)\n'
    ),
    # --- kernel body
    "keyword argument": _body("with T.sblock(name_hint=RUN):\n        pass"),
    "nested call": _body("x = T.max(T.float32(T.int32(RUN)), T.float32(0))"),
    "func_attr value string": _body('T.func_attr({"global_symbol": "RUN_STR"})'),
    "func_attr value call": _body('T.func_attr({"global_symbol": RUN})'),
    "sblock name string": _body('with T.sblock("RUN_STR"):\n        pass'),
    "axis.remap kinds string": _kernel(body=(
        "    for i in range(4):\n"
        '        with T.sblock("b"):\n'
        '            vi = T.axis.remap("RUN_STR", [i])\n'
        "            B[vi] = A[vi]\n")),
    "match_buffer shape string": _kernel('a: T.handle, B: T.Buffer((4,), "float32")', (
        '    A = T.match_buffer(a, ("RUN_STR",), "float32")\n'
        "    for i in range(4):\n        B[i] = A[i]\n")),
    "alloc_buffer shape string": _body('C = T.alloc_buffer(("RUN_STR",), "float32")'),
    "f-string": _body('with T.sblock(f"{RUN}"):\n        pass'),
    "attribute chain on a literal": _body("x = ().__class__.__base__.__subclasses__()"),
    "attribute chain on T": _body("x = T.__dict__"),
    "attribute chain on a buffer": _body("x = A.__class__.__init__.__globals__"),
    "builtin call": _body("x = eval('RUN_STR')"),
    "builtin through NFKC": _body("x = \uff45\uff56\uff41\uff4c('RUN_STR')"),
    "getattr": _body("x = getattr(T, '__dict__')"),
    "comm_reducer lambda": _body('T.attr(T.comm_reducer(lambda x, y: RUN, [T.float32(0)]), "reduce_scope", 0)'),
    "walrus": _body("x = (y := RUN)"),
    "comprehension": _body("x = [RUN for _ in range(1)]"),
    "T.macro": _body("x = T.macro(RUN)"),
    "T.meta_var": _body("x = T.meta_var(RUN)"),
    "call_extern": _body("T.evaluate(T.call_extern('int32', 'system', 'touch MARKER'))"),
    "import in body": _body("import os"),
    # --- the module around the kernel
    "module constant string": "SHAPE = \"RUN_STR\"\n" + _kernel('A: T.Buffer((SHAPE,), "float32"), B: T.Buffer((4,), "float32")'),
    "module constant computed": "N = RUN\n" + _kernel('A: T.Buffer((N,), "float32"), B: T.Buffer((4,), "float32")'),
    "module-level code": "RUN\n" + _kernel(),
    "T rebound at module level": "T = RUN\n" + _kernel(),
    "docstring": _kernel(body='    """RUN"""\n    for i in range(4):\n        B[i] = A[i]\n'),
    # --- constant arithmetic that would keep TVM busy or take the memory
    "power tower": _body("x = ((((2 ** 64) ** 64) ** 64) ** 64) ** 64"),
    "long product": _body("x = " + " * ".join(["(10 ** 18)"] * 200)),
    "big shift": _body("x = 1 << 64 << 64 << 64 << 64"),
    "string repeat": _body("x = 'a' * 10 ** 10"),
    "huge literal": _body("x = " + "9" * 400),
}

#: The payloads that run under ``tvm.script.from_source`` with no screen
#: (measured: ``python tests/payloads.py control DIR``): the corpus's
#: positive control. The two buffer-shape ones then crash TVM (SIGSEGV).
LIVE = frozenset({
    "T.macro", "T.meta_var", "buffer scope keyword", "buffer shape keyword string", "buffer shape string",
    "builtin call", "builtin through NFKC", "comm_reducer lambda", "comprehension", "decorator keyword",
    "decorator positional", "f-string", "func_attr value call", "ir_module class body", "ir_module function body",
    "keyword argument", "nested call", "parameter annotation call", "return annotation",
})
#: The payloads that keep TVM's unscreened parser busy past ``CONTROL_TIMEOUT_S``.
HANGS = frozenset({"power tower"})
CONTROL_TIMEOUT_S = 10

#: The payloads whose kernel is valid TVMScript once nothing of the payload
#: reaches TVM (it is outside the kernel, or in its docstring): leir checks
#: them clean, the others get an error.
CLEAN = frozenset({"module-level code", "T rebound at module level", "docstring"})


@dataclass(frozen=True)
class Payload:
    name: str
    path: Path
    marker: Path
    text: str


def files(directory: Path) -> list[Payload]:
    """Write every payload of the corpus under ``directory``, each with its
    own marker path; returns them."""
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for number, (name, template) in enumerate(CORPUS.items()):
        marker = directory / f"ran-{number}"
        text = template.replace("RUN_STR", RUN_STR).replace("RUN", RUN).replace("MARKER", str(marker))
        path = directory / f"payload_{number}.py"
        path.write_text(text)
        out.append(Payload(name, path, marker, text))
    return out


def ran(payloads: list[Payload]) -> list[str]:
    """The names of the payloads whose marker exists."""
    return [p.name for p in payloads if p.marker.exists()]


def _control(directory: Path) -> None:
    """Give each payload's kernels to ``tvm.script.from_source`` as a file
    that ran nothing else would (T and I bound, module constants given), each
    in a forked child with a 4 GiB cap and a time limit, and print which
    payloads ran and which hung, as JSON."""
    import json
    import os
    import resource
    import signal
    import textwrap
    import warnings

    import tvm.script
    from tvm.script.parser import ir, tirx

    from leir.bridge.tvmscript.discovery import find_kernels

    payloads, hung = files(directory), []
    for payload in payloads:
        pid = os.fork()
        if pid == 0:  # the child: nothing after this returns
            resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
            signal.alarm(CONTROL_TIMEOUT_S)
            for kernel in find_kernels(payload.text)[0]:
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        tvm.script.from_source(textwrap.dedent(kernel.text),
                                               extra_vars={"T": tirx, "I": ir, **kernel.scope.constants})
                except BaseException:  # noqa: BLE001 - the control only watches for the marker
                    pass
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGALRM:
            hung.append(payload.name)
    print(json.dumps({"ran": sorted(ran(payloads)), "hung": sorted(hung)}))


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] != ["control"] or len(sys.argv) != 3:
        sys.exit("usage: python tests/payloads.py control DIR")
    _control(Path(sys.argv[2]))
