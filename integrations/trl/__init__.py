"""trl adapter."""
