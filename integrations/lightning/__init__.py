"""lightning adapter."""
