"""verl's trainer modes as hosts, declared once (`dataflex_callbacks.host.register_host`); importable without verl.

Both the synchronous mode (``dataflex_sync``) and the asynchronous ones (``dataflex_colocate_async``,
``dataflex_separate_async``) read the ``dataflex:`` block through `config.check_verl_config`, which refuses
``dynamic_sampling`` (verl filters groups itself) and ``allocation`` (`config.ALLOCATION_REFUSAL` names verl's
lines). ``tests/integrations/test_host_declarations.py`` checks these declarations against that function.
"""

from __future__ import annotations

from dataflex_callbacks.host import PARTS, REFUSED, RUNS, HostDeclaration, register_host

from .fields import VERL_LOSSES

PARTS_RUN = {**dict.fromkeys(PARTS, RUNS), "dynamic_sampling": REFUSED, "allocation": REFUSED}
PACKAGES = frozenset({"verl", "ray"})

SYNC_HOST = register_host(
    HostDeclaration(
        key="verl",
        name="verl sync (`dataflex_sync`)",
        parts=PARTS_RUN,
        losses=VERL_LOSSES,
        packages=PACKAGES,
        adapter="integrations/verl",
    )
)
ASYNC_HOST = register_host(
    HostDeclaration(
        key="verl-async",
        name="verl async (`dataflex_colocate_async`, `dataflex_separate_async`)",
        parts=PARTS_RUN,
        losses=VERL_LOSSES,
        packages=PACKAGES,
        adapter="integrations/verl",
    )
)
