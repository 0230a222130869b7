"""verl adapter."""
