"""Which names in a Python file stand for TVMScript namespaces.

A file reaches TVMScript through imports: ``from tvm.script import tirx as
T``, ``from tvm.script import tir as T`` (the pre-0.27 name), ``from
tvm.script import ir as I``, ``import tvm`` (then ``tvm.script.tir``), and
so on. ``import_bindings`` reads those imports from the syntax tree and
``resolve`` turns a dotted path such as ``tvm.script.tir.axis.remap`` into
the namespace it lies in and the member it names. Nothing here imports TVM
except ``namespace_values``, which builds the values a kernel's names are
bound to when TVM parses it."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any, Literal

#: "tirx" is TVM 0.27's TIR namespace; "tir" the name older files import,
#: parsed with the renames in ``LEGACY_TIR_RENAMES``; "ir" holds
#: ``ir_module``.
Namespace = Literal["tirx", "tir", "ir"]

#: Module paths a file may import a TVMScript namespace from.
NAMESPACE_MODULES: dict[str, Namespace] = {
    "tvm.script.tirx": "tirx",
    "tvm.script.parser.tirx": "tirx",
    "tvm.script.tir": "tir",
    "tvm.script.parser.tir": "tir",
    "tvm.script.ir": "ir",
    "tvm.script.parser.ir": "ir",
}

#: Packages on the way to a namespace (``tvm.script.tirx.prim_func``).
PACKAGES = frozenset({"tvm", "tvm.script", "tvm.script.parser"})

#: Names ``tvm.script`` exposes directly.
SCRIPT_MEMBERS: dict[str, tuple[Namespace, str]] = {"tvm.script.ir_module": ("ir", "ir_module")}

#: What pre-0.27 TVMScript called by another name (``T.block`` is
#: ``T.sblock`` in 0.27).
LEGACY_TIR_RENAMES = {"block": "sblock", "block_attr": "sblock_attr"}


@dataclass(frozen=True)
class Resolved:
    """A dotted path that lies in a TVMScript namespace: ``namespace`` and
    the member names after it (empty for the namespace itself)."""

    namespace: Namespace
    members: tuple[str, ...]


def resolve(path: str) -> Resolved | None:
    """The namespace and member a fully qualified dotted path names, or
    None when it is a package on the way (``tvm.script``) or not TVMScript."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        prefix = ".".join(parts[:cut])
        if prefix in NAMESPACE_MODULES:
            return Resolved(NAMESPACE_MODULES[prefix], tuple(parts[cut:]))
        if prefix in SCRIPT_MEMBERS:
            namespace, member = SCRIPT_MEMBERS[prefix]
            return Resolved(namespace, (member, *parts[cut:]))
    return None


def is_tvm_path(path: str) -> bool:
    """Whether a dotted path is a package, namespace or member this module
    knows, i.e. whether binding a name to it makes the name an alias."""
    return path in PACKAGES or resolve(path) is not None


def import_bindings(tree: ast.AST) -> dict[str, str]:
    """Local name -> fully qualified dotted path, for every import anywhere
    in the file that binds a name to TVMScript or to a package on the way.

    Imports inside functions count as well: kernels are often defined inside
    a test function that imports ``T`` itself."""
    bindings: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname is not None:
                    if is_tvm_path(alias.name):
                        bindings[alias.asname] = alias.name
                else:
                    # "import tvm.script.tirx" binds "tvm".
                    top = alias.name.split(".")[0]
                    if top == "tvm":
                        bindings["tvm"] = "tvm"
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                path = f"{node.module}.{alias.name}"
                if alias.name != "*" and is_tvm_path(path):
                    bindings[alias.asname or alias.name] = path
    return bindings


def namespace_values(bindings: dict[str, str]) -> dict[str, Any]:
    """The values TVM's parser binds the file's aliases to.

    A package alias (``tvm``) is bound to a stand-in that holds only the
    TVMScript namespaces, not to the real package: the screen already
    refuses anything else, and this makes sure nothing else is reachable."""
    from types import SimpleNamespace

    from tvm.script.parser import ir as ir_namespace
    from tvm.script.parser import tirx as tirx_namespace

    namespaces: dict[Namespace, Any] = {
        "tirx": tirx_namespace,
        "tir": _LegacyTIR(tirx_namespace),
        "ir": ir_namespace,
    }
    parser = SimpleNamespace(tirx=namespaces["tirx"], tir=namespaces["tir"], ir=namespaces["ir"])
    script = SimpleNamespace(
        tirx=namespaces["tirx"],
        tir=namespaces["tir"],
        ir=namespaces["ir"],
        ir_module=ir_namespace.ir_module,
        parser=parser,
    )
    packages = {"tvm": SimpleNamespace(script=script), "tvm.script": script, "tvm.script.parser": parser}

    values: dict[str, Any] = {}
    for name, path in bindings.items():
        if path in packages:
            values[name] = packages[path]
            continue
        resolved = resolve(path)
        if resolved is None:
            continue
        value = namespaces[resolved.namespace]
        for member in resolved.members:
            value = getattr(value, member, None)
        if value is not None:  # None: the file imports a name TVM does not have
            values[name] = value
    return values


class _LegacyTIR:
    """``tvm.script.tir`` as files written for TVM before 0.27 use it: the
    0.27 ``tirx`` namespace with the old names of renamed members."""

    def __init__(self, tirx: Any):
        self._tirx = tirx

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tirx, LEGACY_TIR_RENAMES.get(name, name))
