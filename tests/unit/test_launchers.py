"""The launchers' registry holds together: every launcher in LAUNCHERS has its name in frame.JobKind (and the
Literal no name without a launcher), a row in docs/jobs.md's "Launchers" table, and a fixture in
tests/fixtures/launchers/ (a constructed process table) that it recognises and the launchers before it do not.
"""

from __future__ import annotations

import typing

import pytest
from support.launcher_fixtures import FIXTURES, fixture_attachment, fixture_facts, load_fixture
from support.paths import REPO

from probes.frame import JobKind
from probes.jobs.facts import WatchedTree
from probes.jobs.launchers import LAUNCHERS
from probes.jobs.layout import find_layout

KINDS = [launcher.kind for launcher in LAUNCHERS]


def test_launcher_names_are_distinct_and_are_the_job_kinds_in_order():
    assert len(set(KINDS)) == len(KINDS), f"two launchers share a name: {KINDS}"
    assert KINDS == list(typing.get_args(JobKind)), "frame.JobKind lists the launchers' names, in LAUNCHERS' order"


def docs_launcher_rows() -> list[list[str]]:
    """The cells of the rows of docs/jobs.md's "Launchers" table."""
    text = (REPO / "docs" / "jobs.md").read_text()
    section = text.split("\n## Launchers\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")][2:]  # past the header and its rule
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows]


def test_every_launcher_has_a_row_in_the_docs_table():
    rows = docs_launcher_rows()
    assert [row[0].strip("`") for row in rows] == KINDS, "docs/jobs.md: one Launchers row per launcher, in order"
    for row in rows:
        assert len(row) == 4 and all(row), f"a row says how it is recognised, where ranks come from, how tested: {row}"


def test_every_fixture_is_a_launchers():
    names = sorted(path.name.removesuffix(".json") for path in FIXTURES.glob("*.json"))
    assert set(names) <= set(KINDS), f"fixtures for no launcher: {sorted(set(names) - set(KINDS))}"


@pytest.mark.parametrize("position", range(len(LAUNCHERS)), ids=KINDS)
def test_every_launcher_recognises_its_fixture_and_the_ones_before_it_do_not(position):
    launcher = LAUNCHERS[position]
    path = FIXTURES / f"{launcher.kind}.json"
    assert path.exists(), f"launcher {launcher.kind!r} has no fixture: add {path.relative_to(REPO)}"
    fixture = load_fixture(launcher.kind)
    facts = fixture_facts(fixture)
    tree = WatchedTree(fixture["root_pid"], facts)
    for earlier in LAUNCHERS[:position]:
        assert earlier.find(tree) is None, f"{earlier.kind!r}, asked first, claims {launcher.kind!r}'s fixture"
    layout = launcher.find(tree)
    assert layout is not None and layout.kind == launcher.kind
    assert find_layout(fixture["root_pid"], facts) == layout, "find_layout asks the launchers in LAUNCHERS' order"
    expect = fixture["expect"]
    assert (layout.launcher_pid, [list(r) for r in layout.ranks], layout.main_pid) == (
        expect["launcher_pid"], expect["ranks"], expect["main_pid"])

    attachment = fixture_attachment(fixture, facts)
    for earlier in LAUNCHERS[:position]:
        assert earlier.root_for(attachment) is None, f"{earlier.kind!r} chooses the root for {launcher.kind!r}'s"
    choice = launcher.root_for(attachment)
    assert (choice.root_pid if choice is not None else None) == fixture["attach"]["root_pid"]


def test_fixture_environments_are_read_by_their_launchers_own_variables():
    torchrun_rank = fixture_facts(load_fixture("torchrun"))[1]
    assert torchrun_rank.env.torchelastic and torchrun_rank.env.run_id == "none"
    script_rank = fixture_facts(load_fixture("ranks"))[2]
    assert (script_rank.env.rank, script_rank.env.local_rank, script_rank.env.cuda_visible_devices) == (1, 1, "2,3")
    assert not script_rank.env.torchelastic

