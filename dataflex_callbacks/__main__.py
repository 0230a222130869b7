"""`python -m dataflex_callbacks` is the `dataflex` command."""

import sys

from dataflex_callbacks.cli import main

sys.exit(main())
