"""The core imports and applies every preset with TRL, Lightning and verl unimportable."""

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import importlib.abc, sys

    BLOCKED = ("trl", "lightning", "pytorch_lightning", "verl")

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"{name} is blocked for this test")
            return None

    sys.meta_path.insert(0, Block())
    for name in list(sys.modules):
        if name.split(".")[0] in BLOCKED:
            del sys.modules[name]

    import torch
    torch.set_num_threads(1)
    import dataflex_callbacks as dfc
    from dataflex_callbacks import RolloutBatch, build_strategy, list_presets

    n, length = 20, 6
    batch = RolloutBatch((torch.arange(n) % 3 == 0).float(), group_ids=torch.arange(n) // 5,
                         completion_mask=torch.ones(n, length), advantages=torch.randn(n),
                         logprobs=-torch.rand(n, length), entropies=torch.rand(n, length),
                         domains=["a", "b"] * (n // 2), prompt_keys=[i // 5 for i in range(n)])
    for preset in list_presets():
        strategy = build_strategy(preset)
        strategy.bind_domains(["a", "b"])
        for step in range(3):
            strategy.apply(batch, step)
    leaked = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
    assert not leaked, leaked
    print("ok", len(list_presets()))
    """
)


def test_core_works_without_host_frameworks():
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith("ok")
