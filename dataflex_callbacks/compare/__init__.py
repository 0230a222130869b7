"""Fair comparison of strategies: matched seeds, one budget, paired intervals (``dataflex compare``)."""
