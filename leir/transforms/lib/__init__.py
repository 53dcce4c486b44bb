"""The shared library of the catalogue's steps: what more than one step
needs (loop kinds, loop pairs, tensors and scopes, nests and their
dependences, expressions, rows). A step imports from here and from
``leir.transforms.base``, never from another step (the contract "steps" in
pyproject.toml, checked by tests/test_layers.py)."""
