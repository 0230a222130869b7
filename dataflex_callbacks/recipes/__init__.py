"""Ready-made jobs built on the library: the ``dataflex`` command (``run``, ``compare``), the built-in
task suite and the tiny local model they train. The core never imports this package."""
