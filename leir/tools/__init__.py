"""The tools built on the library: the ranking of next steps (``ranking``,
the ``Ranker`` seam) and the measuring seam (``measuring``), the search
(``optimize``), suggestions (``suggest``), watch mode (``watch``), the
server's optimize process (``jobs``), the command line (``cli``), the
dataset of verified, measured steps (``dataset``) and token counts
(``token_counts``).

Nothing below the tools imports them (``[tool.importlinter]`` in
pyproject.toml)."""
