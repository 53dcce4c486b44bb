"""The catalogue's steps, one module each (``leir.transforms.ALL`` lists them
in order). A step imports the machinery (``leir.transforms.base``,
``applying``, ``rewrite``) and the shared library (``leir.transforms.lib``),
never another step."""
