"""`python -m dataflex_callbacks` is the `dataflex` command."""

import sys

from dataflex_callbacks.recipes.cli import main

sys.exit(main())
