"""The TRL trainers as hosts, declared once (`dataflex_callbacks.host.register_host`): what each runs and refuses.

Each declaration states what the adapter's own checks accept (`trainer_settings.check_trl_strategy` for
``GRPOTrainer`` and ``RLOOTrainer``, `async_host.check_async_strategy` for ``AsyncGRPOTrainer``);
``tests/integrations/test_host_declarations.py`` fails when the two disagree. Changing what a check refuses
means changing the declaration here, and the table in docs/architecture.md
(``python -m dataflex_callbacks.integrations.hosts``).
"""

from __future__ import annotations

from dataflex_callbacks.host import PARTS, REFUSED, RUNS, AllocationAbilities, HostDeclaration, register_host

from .loss_scaling import GRPO_LOSSES
from .rloo import RLOO_LOSSES

PACKAGES = frozenset({"trl", "transformers", "accelerate", "peft", "datasets"})
"""TRL and the libraries that call into this adapter during ``trainer.train()``."""

# The async worker: a pilot and one commit into groups of num_generations (async_host.check_async_strategy).
PILOT_COMMIT = AllocationAbilities(unequal_groups=False, reuses_responses=False, rounds_per_step=(2,))
# GRPOTrainer: a pilot and a commit, or stages into groups of different sizes laid out in TRL's fixed batch with
# masked fillers (allocation.generate_stages), also a step of only the committed groups (refill: false); with reuse,
# stored correct rows put back into all-wrong groups (reuse.StagedReuse).
STAGES = AllocationAbilities(unequal_groups=True, reuses_responses=True, rounds_per_step=None, fewer_groups=True)

GRPO_HOST = register_host(
    HostDeclaration(
        key="trl",
        name="TRL sync (`GRPOTrainer`)",
        parts=dict.fromkeys(PARTS, RUNS),
        allocation=STAGES,
        losses=GRPO_LOSSES,
        packages=PACKAGES,
        adapter="integrations/trl",
    )
)
RLOO_HOST = register_host(
    HostDeclaration(
        key="trl-rloo",
        name="TRL sync (`RLOOTrainer`)",
        parts={**dict.fromkeys(PARTS, RUNS), "dynamic_sampling": REFUSED, "allocation": REFUSED},
        losses=RLOO_LOSSES,
        packages=PACKAGES,
        adapter="integrations/trl",
    )
)
ASYNC_HOST = register_host(
    HostDeclaration(
        key="trl-async",
        name="TRL async (`AsyncGRPOTrainer`)",
        parts=dict.fromkeys(PARTS, RUNS),
        allocation=PILOT_COMMIT,
        packages=PACKAGES,
        adapter="integrations/trl",
    )
)
