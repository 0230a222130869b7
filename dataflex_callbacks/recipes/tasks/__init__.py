"""Verifiable task domains for RL fine-tuning demos and tests, and a loader for user prompt datasets."""

from .domains import TASK_DOMAINS, TaskDomain
from .evaluation import evaluate, generate_greedy, generate_sampled, sampled_pass_at_1
from .loading import load_prompt_dataset

# The module's own name stays the module (verl loads it as pkg://dataflex_callbacks.recipes.tasks.multi_domain_reward).
from .multi_domain_reward import MultiDomainReward, compute_score
from .suite import TaskReward, load_task_suite, make_reward_fn, prompt_key
from .verifiers import (
    answer_is_readable,
    coin_flip,
    exact_match,
    extract_answer,
    extract_number,
    get_verifier,
    numeric_free_text_match,
    numeric_match,
    prefix_match,
)

__all__ = [
    "TASK_DOMAINS",
    "TaskDomain",
    "MultiDomainReward",
    "TaskReward",
    "answer_is_readable",
    "coin_flip",
    "compute_score",
    "evaluate",
    "exact_match",
    "extract_answer",
    "extract_number",
    "generate_greedy",
    "generate_sampled",
    "get_verifier",
    "load_prompt_dataset",
    "load_task_suite",
    "make_reward_fn",
    "numeric_free_text_match",
    "numeric_match",
    "prefix_match",
    "prompt_key",
    "sampled_pass_at_1",
]
