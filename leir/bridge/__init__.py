"""Where LEIR meets TVM and Python documents.

``lower`` builds TensorIR from a LEIR program and ``raise_tir`` reads
TensorIR back; ``run`` builds and runs a program on a target (``targets``)
and ``comparison`` judges its outputs against the NumPy reference; the
``tvmscript`` package reads a Python document's kernels without running it;
``document`` is the document model (a ``.leir`` or Python file) and
``outline`` its symbols, folds and semantic tokens.

It sits on the language core (the modules at the top of ``leir/``) and under
the transformations, the analysis, the measurement engine and the tools
(``[tool.importlinter]`` in pyproject.toml)."""
