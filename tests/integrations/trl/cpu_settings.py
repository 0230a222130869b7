"""GRPOConfig settings every CPU test run of the TRL adapter shares (fixtures, helpers and the torchrun worker)."""

CPU_RUN_SETTINGS = dict(logging_steps=1, report_to=[], save_strategy="no", use_cpu=True, bf16=False, disable_tqdm=True)
