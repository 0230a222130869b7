"""Shared pytest setup: one CPU thread (the CI machine is shared), offline Hugging Face hub."""

import os
import sys

os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

torch.set_num_threads(1)

# tests/ is not a package: helper modules next to the tests are imported by bare name.
_CORE_TESTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "core")
if _CORE_TESTS not in sys.path:
    sys.path.insert(0, _CORE_TESTS)

# No per-example deadline: speed is measured in benchmarks, never asserted in tests, and on a loaded
# 2-core machine one example can take 500 ms that takes 8 ms alone (a hypothesis deadline then fails
# a correct test as "flaky").
try:
    from hypothesis import settings as _hypothesis_settings
except ImportError:  # the core's tests can run without the dev extras
    pass
else:
    _hypothesis_settings.register_profile("shared-cpu", deadline=None)
    _hypothesis_settings.load_profile("shared-cpu")
