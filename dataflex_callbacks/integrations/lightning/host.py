"""Lightning as a host, declared once (`dataflex_callbacks.host.register_host`): what it runs, what the module drives.

The callback runs select, reweight, mix and pre_select for the module (``self.dataflex.loss``,
``self.dataflex.sampler``); dynamic sampling (a ``SignalGroupBuffer``) and allocation
(``self.dataflex.allocation_rounds``) are driven by the module's ``training_step``, every allocator
included (groups of any size, reuse, any number of rounds). ``tests/integrations/test_host_declarations.py``
checks this against the callback's own checks.
"""

from __future__ import annotations

from dataflex_callbacks.host import (
    PARTS,
    RUNS,
    YOU_DRIVE,
    AllocationAbilities,
    HostDeclaration,
    register_host,
)

from .aggregation import LIGHTNING_LOSSES

LIGHTNING_HOST = register_host(
    HostDeclaration(
        key="lightning",
        name="Lightning",
        parts={**dict.fromkeys(PARTS, RUNS), "dynamic_sampling": YOU_DRIVE, "allocation": YOU_DRIVE},
        allocation=AllocationAbilities(unequal_groups=True, reuses_responses=True, fewer_groups=True),
        losses=LIGHTNING_LOSSES,
        packages=frozenset({"lightning", "pytorch_lightning", "lightning_fabric"}),
        adapter="integrations/lightning",
    )
)
