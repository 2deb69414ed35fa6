"""sqlite_utils, imported with pandas hidden from it: `from appliance.store.lean_sqlite_utils import sqlite_utils`.

sqlite_utils imports pandas whenever it is installed (the training stack brings it) only to give pandas'
Timestamp a column type, and the store never writes one. That import was most of the wall time of every
command that opens the store: 4 to 5 of the 9 to 13 s `appliance pause` took while a loop trained at load 5
(issue 52). A process that imported pandas already keeps it; one that imports it later gets it. The store's
modules import sqlite_utils only through here, and `db` (the first of them) before anything that imports it.
"""

from __future__ import annotations

import sys
from types import ModuleType


def _without_pandas() -> ModuleType:
    if "pandas" in sys.modules:
        import sqlite_utils
        return sqlite_utils
    sys.modules["pandas"] = None  # type: ignore[assignment]  # a None entry makes `import pandas` fail
    try:
        import sqlite_utils
    finally:
        if "pandas" in sys.modules and sys.modules["pandas"] is None:
            del sys.modules["pandas"]
    return sqlite_utils


sqlite_utils = _without_pandas()
