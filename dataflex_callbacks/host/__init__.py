"""The host contract: what every adapter (TRL, Lightning, verl) does with a strategy, written once."""

from dataflex_callbacks.host.contract import (
    AGGREGATIONS, AcceptedPrompts, BatchFeed, Candidates, DEFAULT_DOMAIN_KEY, HOST_LOSSES, HostLosses,
    PromptAcceptance, PromptSource, ROLLOUT_FIELDS, ROW_NORMALISED, TENSOR_FIELDS, accept_from, accept_prompts,
    acts_before_rollout, aggregate, as_strategy, batch_fields, check_aggregation, checkpoint_state, decide,
    finish_loss, grpo_fields, kept_token_mask, load_state_file, local_decision, loss_aggregation,
    micro_batch_decision, prompt_choosing_parts, read_state_file, removal_scale, resolve_domain_key,
    restore_strategy, restrict_rows, set_group_size,
)
from dataflex_callbacks.host.contract import __all__
