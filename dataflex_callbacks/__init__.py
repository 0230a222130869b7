"""dataflex-callbacks: data strategies for RL fine-tuning of language models."""
