"""Two threads importing a package and its submodule at once
(``leir_server.imports``): the interleaving that failed in CI, forced step
by step, deadlocks without the server's import order and not with it."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# Thread B starts importing ``pkg`` and, holding pkg's lock, waits in pkg's
# loader (before pkg is in sys.modules) until thread A is blocked on an import lock;
# A imports ``pkg.child``. Then B goes on, and pkg/__init__ imports
# pkg.child. Without the parents-first order A holds pkg.child's lock while
# waiting for pkg's: B's import of pkg.child is the deadlock CPython
# reports. The wait uses the import system's own record of who is blocked
# (``_blocking_on``), so the interleaving does not depend on timing.
SCENARIO = """
import importlib._bootstrap as bootstrap
import importlib.machinery
import json
import sys
import threading
import time

sys.path.insert(0, {root!r})
if {install!r}:
    from leir_server import imports
    imports.install()

b_holds_pkg = threading.Event()
idents = {{}}
results = {{}}


def blocked(ident):
    return bool(bootstrap._blocking_on.get(ident))


class GatedLoader:
    # pkg's own loader: waits (holding pkg's import lock, before pkg is in
    # sys.modules) until A is blocked on an import lock.

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        b_holds_pkg.set()
        deadline = time.monotonic() + 20
        while "A" not in idents or not blocked(idents["A"]):
            if time.monotonic() > deadline:
                results["gate"] = "A never blocked"
                break
            time.sleep(0.005)
        return None

    def exec_module(self, module):
        self.loader.exec_module(module)


class Gate:
    def find_spec(self, name, path, target=None):
        if name != "pkg" or threading.current_thread().name != "B":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        spec.loader = GatedLoader(spec.loader)
        return spec


sys.meta_path.insert(0, Gate())


def a():
    idents["A"] = threading.get_ident()
    b_holds_pkg.wait(20)
    try:
        import pkg.child
        results["A"] = pkg.child.VALUE
    except BaseException as e:
        results["A"] = type(e).__name__ + ": " + str(e)


def b():
    try:
        import pkg
        results["B"] = pkg.VALUE
    except BaseException as e:
        results["B"] = type(e).__name__ + ": " + str(e)


threads = [threading.Thread(target=a, name="A"), threading.Thread(target=b, name="B")]
for t in threads:
    t.start()
for t in threads:
    t.join(60)
print(json.dumps(results))
"""


def _run(tmp_path: Path, install: bool) -> dict:
    package = tmp_path / "pkg"
    package.mkdir(exist_ok=True)
    (package / "__init__.py").write_text("from pkg.child import VALUE\n")
    (package / "child.py").write_text("VALUE = 42\n")
    script = SCENARIO.format(root=str(tmp_path), install=install)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.skipif(sys.version_info >= (3, 15), reason="CPython 3.15 takes parent locks first itself")
def test_the_interleaving_deadlocks_without_the_import_order(tmp_path):
    results = _run(tmp_path, install=False)

    assert "gate" not in results
    assert results["B"].startswith("_DeadlockError: deadlock detected")
    assert results["A"] == 42


def test_the_import_order_lets_both_threads_import(tmp_path):
    results = _run(tmp_path, install=True)

    assert results == {"A": 42, "B": 42}


def test_relative_and_missing_imports_behave_as_before(tmp_path):
    (tmp_path / "outer" / "inner").mkdir(parents=True)
    (tmp_path / "outer" / "__init__.py").write_text("")
    (tmp_path / "outer" / "inner" / "__init__.py").write_text("")
    (tmp_path / "outer" / "inner" / "leaf.py").write_text("VALUE = 7\n")
    (tmp_path / "outer" / "user.py").write_text("from .inner.leaf import VALUE\n")
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        from leir_server import imports
        imports.install()
        imports.install()
        assert imports.installed()
        from outer.user import VALUE
        assert VALUE == 7
        assert imports.load("outer.inner.leaf").VALUE == 7
        try:
            import no_such_package_here.child
        except ModuleNotFoundError as e:
            print(e.name)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "no_such_package_here"


def test_the_server_installs_the_import_order():
    script = "from leir_server.server import build_server\nfrom leir_server import imports\nbuild_server()\nprint(imports.installed())"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"
