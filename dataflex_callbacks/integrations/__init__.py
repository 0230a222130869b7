"""Host adapters (TRL, Lightning, verl); each imports its host framework, the core never does."""
