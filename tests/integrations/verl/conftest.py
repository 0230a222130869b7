"""verl tests run only in .venv-verl (scripts/test_verl.sh); elsewhere they skip with a reason.

Set DATAFLEX_REQUIRE_VERL=1 (as scripts/test_verl.sh does) to turn a missing verl into an error,
so the dedicated CI step cannot pass by skipping.
"""

import logging
import os
import sys
import warnings

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:  # helper modules next to the tests are imported by bare name
    sys.path.insert(0, _HERE)

os.environ.setdefault("VERL_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
warnings.filterwarnings("ignore", message=".*engine is not available.*")

try:
    import verl  # noqa: F401
except ImportError:
    if os.environ.get("DATAFLEX_REQUIRE_VERL") == "1":
        raise
logging.getLogger("verl").setLevel(logging.WARNING)
