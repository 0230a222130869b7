"""verl tests run only in .venv-verl (scripts/test_verl.sh); elsewhere they skip with a reason.

Set DATAFLEX_REQUIRE_VERL=1 (as scripts/test_verl.sh does) to turn a missing verl into an error,
so the dedicated CI step cannot pass by skipping.
"""

import logging
import os
import sys
import warnings

import pytest

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


@pytest.fixture(scope="module")
def transfer_queue():
    """A local Ray cluster with TransferQueue started, for one test module (its controller and storage unit each
    reserve one Ray CPU); closed after the module."""
    import ray
    import transfer_queue as tq
    from omegaconf import OmegaConf

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    tq.init(OmegaConf.create({"backend": {"SimpleStorage": {"num_data_storage_units": 1}}}))
    yield tq
    tq.close()
    ray.shutdown()
