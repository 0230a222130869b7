"""Lightning adapter tests: skipped where Lightning is not installed; the toy module next to them imports by
bare name.
"""

import os
import sys

import pytest

pytest.importorskip("lightning", reason="Lightning is not installed; pip install -e '.[lightning]'")

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
