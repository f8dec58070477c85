"""Pilot tests of a job merged across nodes on screen, replayed from a recording of two nodes' frames (built
with tests/support/cluster_frames.py): the rank table's node column, a header line per node, the lost node said
in red with its time, and the verdict naming the straggler rank and its node; selecting a rank by its node and
PID (both nodes' ranks have one PID) with the GPU, CPU and Stacks panes following its node; and the live path,
the app reading two real subprocesses' streams (each writes a saved agent stream, then stays open) through the
merge.
"""

from __future__ import annotations

from support.cluster_frames import PID, straggler_round
from support.job_frames import T0
from support.pilot import hot_functions, pilot_test, table_rows

from probes.frame import GpuDevice, GpuReading
from tui.app import make_app

WIDE = (160, 48)


def merged_frames():
    """Both nodes for 8 rounds, then n1 alone for 12 more: n2 goes silent and is lost."""
    frames = [f for i in range(8) for f in straggler_round(i)]
    return frames + [straggler_round(i)[0] for i in range(8, 20)]


@pilot_test
async def test_the_rank_table_shows_each_rank_with_its_node_and_the_header_a_line_per_node():
    app = make_app(replay_frames=merged_frames(), clock=lambda: T0 + 21)
    async with app.run_test(size=WIDE) as pilot:
        await pilot.pause()
        assert type(app.monitor).__name__ == "ClusterMonitor"
        rows = table_rows(app, "ranks-table")
        assert [(row[0], row[1]) for row in rows] == [("0", "n1")]  # n2 is lost: its rank is not judged
        note = app.job_note_text().plain
        assert note.splitlines()[0].strip().startswith("n1: 1 rank")
        assert "n2: lost at" in note and "silent: no frame for 10 s" in note
        assert "2 nodes merged, 1 lost" in app.status_text().plain


@pilot_test
async def test_while_both_nodes_answer_the_straggler_is_named_with_its_node():
    app = make_app(replay_frames=[f for i in range(8) for f in straggler_round(i)], clock=lambda: T0 + 9)
    async with app.run_test(size=WIDE) as pilot:
        await pilot.pause()
        rows = table_rows(app, "ranks-table")
        assert [(row[0], row[1]) for row in rows] == [("0", "n1"), ("1", "n2")]
        assert rows[1][-1].startswith("straggler")
        assert app.view.verdict.evidence[0].startswith("rank 1 on n2 is the straggler")
        assert app.job_note_text().plain.splitlines()[1].strip() == "n2: 1 rank · data_bound"


def gpu_at(clock: int) -> GpuReading:
    return GpuReading(available=True, devices=(GpuDevice(index=0, name="NVIDIA H200", sm_clock_mhz=clock,
                                                         max_sm_clock_mhz=1980, in_target=True),))


def title_of(app, pane_id: str) -> str:
    title = app.query_one(f"#{pane_id}").border_title
    return getattr(title, "plain", str(title))


def pane_node(app) -> tuple[str, str, str]:
    """The node each of the GPU, CPU and Stacks panes says it shows."""
    return tuple(title_of(app, pane).split(" · ")[1] for pane in ("gpu", "cpu", "stacks"))


@pilot_test
async def test_a_rank_is_selected_by_node_and_pid_and_the_other_panes_follow_its_node():
    """Both nodes' ranks have PID 501 (each node is its own PID namespace): [ ] reach each rank, enter on n2's row
    selects n2's, and the GPU, CPU and Stacks panes show (and name) the selected rank's node."""
    frames = [f for i in range(8) for f in straggler_round(i, gpu_at(1980), gpu_at(1200))]
    app = make_app(replay_frames=frames, clock=lambda: T0 + 9)
    async with app.run_test(size=WIDE) as pilot:
        await pilot.pause()
        assert app.selected_rank_key is None
        assert pane_node(app) == ("n1", "n1", "n1")  # all ranks: the lead (lowest) rank's node
        await pilot.press("right_square_bracket")
        assert app.selected_rank_key == f"{PID}@n1"
        assert pane_node(app) == ("n1", "n1", "n1")
        await pilot.press("right_square_bracket")
        assert app.selected_rank_key == f"{PID}@n2", "] must reach rank 1 on n2, whose PID is rank 0's too"
        marks = [row[0] for row in table_rows(app, "ranks-table")]
        assert marks == ["0", "▶ 1"]
        assert "rank 1 on n2 (PID 501) selected" in title_of(app, "ranks")
        assert pane_node(app) == ("n2", "n2", "n2")
        assert "1200/1980 MHz" in str(app.query_one("#gpu-text").content)
        assert hot_functions(app)[0].startswith("slow_augment")  # n2's rank's stacks, not n1's
        await pilot.press("right_square_bracket")  # all ranks again: the lead node
        assert app.selected_rank_key is None and pane_node(app) == ("n1", "n1", "n1")
        assert not any(f.startswith("slow_augment") for f in hot_functions(app))
        assert "1980/1980 MHz" in str(app.query_one("#gpu-text").content)

        await pilot.press("5")
        assert app.focused.id == "ranks-table"
        await pilot.press("j", "enter")  # the second row: n2's rank
        assert app.selected_rank_key == f"{PID}@n2" and app.selected_rank_pid == PID
        assert pane_node(app) == ("n2", "n2", "n2")


@pilot_test
async def test_beyond_sixteen_ranks_those_that_agree_are_one_row_under_their_first():
    from support.cluster_frames import many_ranks_round

    frames = [f for i in range(8) for f in many_ranks_round(i)]
    app = make_app(replay_frames=frames, clock=lambda: T0 + 9)
    async with app.run_test(size=WIDE) as pilot:
        await pilot.pause()
        rows = table_rows(app, "ranks-table")
        assert [(row[0], row[1]) for row in rows] == [("0", "n1"), ("+18", "n2..n20"), ("7", "n8")]
        assert rows[1][-1].startswith("like rank 0: 1–6,")  # the rest clipped in a narrow column
        assert rows[2][-1].startswith("straggler")
        assert "20 ranks, agreeing ranks summarised" in title_of(app, "ranks")
        for _ in range(4):  # rank 0, 1, 2, 3: a selected rank is shown on its own row, out of its group
            await pilot.press("right_square_bracket")
        assert app.selected_rank_key == f"{PID}@n4"
        rows = table_rows(app, "ranks-table")
        assert [row[0] for row in rows] == ["0", "+17", "▶ 3", "7"]
        assert pane_node(app) == ("n4", "n4", "n4")
