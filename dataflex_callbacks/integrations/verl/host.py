"""verl's trainer modes as hosts, declared once (`dataflex_callbacks.host.register_host`); importable without verl.

Both the synchronous mode (``dataflex_sync``) and the asynchronous ones (``dataflex_colocate_async``,
``dataflex_separate_async``) read the ``dataflex:`` block through `config.check_verl_config`, which refuses
``dynamic_sampling`` (verl filters groups itself) in every mode, and ``allocation`` in the asynchronous ones
(`config.ALLOCATION_ASYNC_REFUSAL`); the sync mode runs a pilot and one commit per prompt into groups of G
(`allocation.VerlAllocation`), so an allocator that needs more is refused there (`config.check_allocation` reads
`SYNC_HOST`'s abilities). ``tests/integrations/test_host_declarations.py`` checks these declarations against that
function.
"""

from __future__ import annotations

from dataflex_callbacks.host import PARTS, REFUSED, RUNS, AllocationAbilities, HostDeclaration, register_host

from .fields import VERL_LOSSES

SYNC_PARTS = {**dict.fromkeys(PARTS, RUNS), "dynamic_sampling": REFUSED}
ASYNC_PARTS = {**SYNC_PARTS, "allocation": REFUSED}
PACKAGES = frozenset({"verl", "ray"})

SYNC_HOST = register_host(
    HostDeclaration(
        key="verl",
        name="verl sync (`dataflex_sync`)",
        parts=SYNC_PARTS,
        allocation=AllocationAbilities(rounds_per_step=(2,)),  # a pilot and one commit, groups of G
        losses=VERL_LOSSES,
        packages=PACKAGES,
        adapter="integrations/verl",
    )
)
ASYNC_HOST = register_host(
    HostDeclaration(
        key="verl-async",
        name="verl async (`dataflex_colocate_async`, `dataflex_separate_async`)",
        parts=ASYNC_PARTS,
        losses=VERL_LOSSES,
        packages=PACKAGES,
        adapter="integrations/verl",
    )
)
