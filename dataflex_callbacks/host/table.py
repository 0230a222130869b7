"""The host x part table of docs/architecture.md, written from the hosts' declarations (`register_host`).

``python -m dataflex_callbacks.integrations.hosts`` prints it with every adapter's declaration loaded;
``tests/core/host/test_table.py`` regenerates it and fails when docs/architecture.md holds anything
else between `TABLE_START` and `TABLE_END`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from dataflex_callbacks.components.allocation import Allocator, AllocatorNeeds
from dataflex_callbacks.errors import ConfigError
from dataflex_callbacks.host.declarations import PARTS, HostDeclaration
from dataflex_callbacks.registry import component_class, list_components

TABLE_START = "<!-- host-table:start (python -m dataflex_callbacks.integrations.hosts) -->"
TABLE_END = "<!-- host-table:end -->"


def builtin_allocators() -> tuple[AllocatorNeeds, ...]:
    """The declared needs of every allocator this library ships (a user's own registered ones left out)."""
    # The registry holds only subclasses of the kind's base class (`registry.register`).
    classes = [cast(type[Allocator], component_class("allocation", name)) for name in list_components("allocation")]
    return tuple(AllocatorNeeds.of(cls) for cls in classes if cls.__module__.startswith("dataflex_callbacks."))


def host_table(hosts: Sequence[HostDeclaration], allocators: Sequence[AllocatorNeeds]) -> str:
    """The markdown table of what each of ``hosts`` does with each part and each allocator, one row per host.

    A part's cell is the host's declaration; an allocator's cell follows from the allocator's declared needs
    and the host's `AllocationAbilities` (`HostDeclaration.serves`).
    """
    columns = [*PARTS, *(f"allocation: `{needs.name}`" for needs in allocators)]
    lines = [
        "| host | " + " | ".join(columns) + " |",
        "|---|" + "---|" * len(columns),
    ]
    for host in hosts:
        cells = [host.supports(part) for part in PARTS] + [host.serves(needs) for needs in allocators]
        lines.append(f"| {host.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def replace_table(text: str, table: str) -> str:
    """``text`` (docs/architecture.md) with ``table`` between its `TABLE_START` and `TABLE_END` lines."""
    head, start, rest = text.partition(TABLE_START)
    _, end, tail = rest.partition(TABLE_END)
    if not start or not end:
        raise ConfigError(
            f"the text has no {TABLE_START!r} ... {TABLE_END!r} block to replace; put both lines where the table goes"
        )
    return f"{head}{TABLE_START}\n{table}\n{TABLE_END}{tail}"
