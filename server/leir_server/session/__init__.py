"""The server's state: the mutable ``Session`` (``session.py``), the
immutable ``DocumentSnapshot`` a request reads (``snapshot.py``) and the
``leir`` settings (``settings.py``).

The names are also here, where callers outside the server find them
(``from leir_server.session import Settings``: the VS Code extension's
end-to-end test reads the defaults so).
"""

from leir_server.session.session import Session
from leir_server.session.settings import CONFIG_SECTION, Settings
from leir_server.session.snapshot import DocumentSnapshot

__all__ = ["CONFIG_SECTION", "DocumentSnapshot", "Session", "Settings"]
