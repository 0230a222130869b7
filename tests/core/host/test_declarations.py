"""A host declares itself once (`register_host`): its parts, the allocators it serves, its losses, its packages."""

from __future__ import annotations

import pytest

from dataflex_callbacks.components.allocation import AllocatorNeeds
from dataflex_callbacks.errors import ConfigError, library_packages, user_stacklevel
from dataflex_callbacks.host import (
    OWN_LOOP,
    PARTS,
    REFUSED,
    ROW_NORMALISED,
    RUNS,
    YOU_DRIVE,
    AllocationAbilities,
    HostDeclaration,
    HostLosses,
    declarations,
    host_declaration,
    host_losses,
    loss_aggregation,
    register_host,
    registered_hosts,
)
from dataflex_callbacks.host.table import TABLE_END, TABLE_START, builtin_allocators, host_table, replace_table

SCREEN = AllocatorNeeds("screen", equal_groups=True, reuses_responses=False, rounds_per_step=2)
ADAPTIVE = AllocatorNeeds("adaptive", equal_groups=False, reuses_responses=True, rounds_per_step=None)
PILOT_COMMIT = AllocationAbilities(rounds_per_step=(2,))


@pytest.fixture
def hosts(monkeypatch):
    """The registry as it is, restored after the test (a test host must not reach another test's table)."""
    monkeypatch.setattr(declarations, "_HOSTS", dict(declarations._HOSTS))
    monkeypatch.setattr("dataflex_callbacks.errors._LIBRARY_PACKAGES", set(library_packages()))


def mine(**changes) -> HostDeclaration:
    losses = HostLosses("my host", "loss_mode", {"mean": "sequence_mean", "sum": "token_sum"}, "MyConfig(loss_mode=)")
    fields = dict(
        key="test-host",
        name="my host",
        parts={**dict.fromkeys(PARTS, RUNS), "allocation": REFUSED},
        losses=losses,
        packages=frozenset({"my_framework"}),
    )
    return HostDeclaration(**{**fields, **changes})


def test_a_host_registers_its_parts_losses_and_packages_once(hosts):
    declaration = mine()
    assert register_host(declaration) is declaration
    assert register_host(mine()) == declaration  # the same declaration again (a re-import) is fine
    assert host_declaration("test-host") is declaration and declaration in registered_hosts()
    assert host_losses("test-host") is declaration.losses and loss_aggregation("test-host", "sum") == "token_sum"
    assert declaration.losses.names_of(*ROW_NORMALISED) == ("mean",)
    assert "my_framework" in library_packages()
    with pytest.raises(ConfigError, match=r"unknown my host loss_mode 'median'.*'mean', 'sum'.*MyConfig"):
        loss_aggregation("test-host", "median")
    with pytest.raises(ConfigError, match=r"'test-host' is registered already.*its own key"):
        register_host(mine(parts=dict.fromkeys(PARTS, RUNS)))
    with pytest.raises(ConfigError, match=r"no loss names registered for host 'own-loop'.*test-host"):
        host_losses(OWN_LOOP.key)
    with pytest.raises(ConfigError, match=r"no host 'nowhere' is registered.*own-loop.*host.py"):
        host_declaration("nowhere")


def test_a_declaration_names_every_part_once_with_a_known_support(hosts):
    with pytest.raises(ConfigError, match=r"missing \['allocation'\], unknown \['rollout'\]"):
        register_host(mine(key="a", parts={**dict.fromkeys(PARTS[:-1], RUNS), "rollout": RUNS}))
    with pytest.raises(ConfigError, match=r"parts \{'mix': 'maybe'\}.*'yes', 'you drive', 'no'"):
        register_host(mine(key="b", parts={**dict.fromkeys(PARTS, RUNS), "mix": "maybe"}))
    with pytest.raises(ConfigError, match=r"unknown aggregation kind\(s\) \['median'\].*token_mean"):
        register_host(mine(key="c", losses=HostLosses("other", "loss", {"m": "median"}, "OtherConfig")))
    with pytest.raises(ConfigError, match=r"expects a HostDeclaration; got dict"):
        register_host({"key": "d"})
    assert "a" not in {h.key for h in registered_hosts()}


def test_an_allocators_cell_follows_from_its_needs_and_the_hosts_abilities():
    trl_like = mine(parts=dict.fromkeys(PARTS, RUNS), allocation=PILOT_COMMIT)
    assert trl_like.serves(SCREEN) == RUNS and trl_like.serves(ADAPTIVE) == REFUSED
    assert PILOT_COMMIT.refusal(ADAPTIVE) == "its groups differ in size"
    assert PILOT_COMMIT.refusal(SCREEN._replace(rounds_per_step=3)) == "3 rounds per step, where the host runs 2"
    assert AllocationAbilities(unequal_groups=True).refusal(ADAPTIVE) == "it puts earlier responses back into groups"
    assert mine().serves(SCREEN) == REFUSED  # no allocation part: no allocator
    assert OWN_LOOP.serves(ADAPTIVE) == OWN_LOOP.serves(SCREEN) == YOU_DRIVE
    with pytest.raises(ConfigError, match=r"unknown strategy part 'rollout'; choose one of \['select'"):
        OWN_LOOP.supports("rollout")


def test_the_table_is_written_from_the_declarations():
    allocators = builtin_allocators()
    assert {needs.name for needs in allocators} >= {"screen", "adaptive"}
    trl_like = mine(parts=dict.fromkeys(PARTS, RUNS), allocation=PILOT_COMMIT)
    table = host_table([trl_like, OWN_LOOP], [SCREEN, ADAPTIVE]).splitlines()
    assert table[0] == (
        "| host | select | reweight | mix | pre_select | dynamic_sampling | allocation | allocation: `screen` | "
        "allocation: `adaptive` |"
    )
    assert table[2] == "| my host | yes | yes | yes | yes | yes | yes | yes | no |"
    assert table[3] == "| your own loop |" + " you drive |" * 8
    text = f"before\n{TABLE_START}\nold\n{TABLE_END}\nafter\n"
    assert replace_table(text, "new") == f"before\n{TABLE_START}\nnew\n{TABLE_END}\nafter\n"
    with pytest.raises(ConfigError, match="host-table:start.*put both lines"):
        replace_table("no markers", "new")


def test_a_registered_hosts_frames_are_skipped_by_warnings(hosts):
    """`user_stacklevel` skips the frames of the packages a host declares, so a warning names the user's line."""
    library = {"__name__": "dataflex_callbacks.kit", "user_stacklevel": user_stacklevel}
    exec("def warn():\n    return user_stacklevel()\n", library)
    framework = {"__name__": "my_framework.trainer", "warn": library["warn"]}
    exec("def train():\n    return warn()\n", framework)
    assert framework["train"]() == 2  # the library's frame skipped, the framework's named
    register_host(mine())
    assert framework["train"]() == 3  # the framework's frame is skipped too: the test's line is named
