"""Every host's declaration, loaded from the adapters' folders; run as a module it prints the host x part table.

``python -m dataflex_callbacks.integrations.hosts`` prints the table docs/architecture.md holds between its
``host-table`` markers (``--write docs/architecture.md`` puts it there). An adapter is found by its folder:
``dataflex_callbacks/integrations/<host>/`` whose ``__init__`` imports its ``host.py`` (`register_host`), so a
new host adds no line here. Loading imports each adapter, hence its framework (TRL, Lightning; verl's
declaration needs no verl).
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
from pathlib import Path

from dataflex_callbacks.errors import ConfigError
from dataflex_callbacks.host import OWN_LOOP, HostDeclaration, registered_hosts
from dataflex_callbacks.host.table import builtin_allocators, host_table, replace_table

ADAPTERS_PACKAGE = "dataflex_callbacks.integrations"


def adapter_names() -> list[str]:
    """The adapter packages under ``dataflex_callbacks/integrations/``, by folder name, sorted."""
    folder = Path(__file__).parent
    return sorted(info.name for info in pkgutil.iter_modules([str(folder)]) if info.ispkg)


def load_hosts() -> tuple[HostDeclaration, ...]:
    """Every adapter's host declarations (each adapter imported), sorted by adapter, then `OWN_LOOP` last.

    An adapter whose framework is missing is a `ConfigError` naming it and what to install.
    """
    for name in adapter_names():
        try:
            importlib.import_module(f"{ADAPTERS_PACKAGE}.{name}")
        except ImportError as error:
            raise ConfigError(
                f"the {name} adapter's host declaration could not be loaded ({error}); install its framework "
                f"(pip install 'dataflex-callbacks[{name}]') to list every host"
            ) from error
    adapters = sorted((h for h in registered_hosts() if h is not OWN_LOOP), key=lambda h: h.adapter)
    return (*adapters, OWN_LOOP)


def main(argv: list[str] | None = None) -> None:
    """Print the host x part table, or write it between the markers of ``--write FILE``."""
    parser = argparse.ArgumentParser(prog="python -m dataflex_callbacks.integrations.hosts", description=__doc__)
    parser.add_argument("--write", type=Path, help="a markdown file whose host-table markers receive the table")
    args = parser.parse_args(argv)
    table = host_table(load_hosts(), builtin_allocators())
    if args.write is None:
        print(table)
        return
    args.write.write_text(replace_table(args.write.read_text(), table))


if __name__ == "__main__":
    main()
