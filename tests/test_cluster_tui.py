"""Pilot tests of a job merged across nodes on screen, replayed from a recording of two nodes' frames (built
with tests/test_cluster.py's helpers): the rank table's node column, a header line per node, the lost node said
in red with its time, and the verdict naming the straggler rank and its node; and the live path, the app
reading two real subprocesses' streams (each writes a saved agent stream, then stays open) through the merge.
"""

from __future__ import annotations

from probes.cluster import AgentSpec, AgentStreams, ClusterMonitor
from probes.frame import to_jsonable
from probes.recording import json_line, recording_header
from tests.test_cluster import straggler_round
from tests.test_diagnose_job import T0
from tests.test_tui_app import pilot_test, table_rows, wait_until
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


@pilot_test
async def test_live_the_app_reads_the_agents_streams_and_merges_them(tmp_path):
    specs = []
    for k, node in enumerate(("n1", "n2")):
        stream = tmp_path / f"{node}.jsonl"
        stream.write_text(json_line(recording_header({"node": node})) + "".join(
            json_line(to_jsonable(straggler_round(i)[k])) for i in range(8)))
        specs.append(AgentSpec(node, ("sh", "-c", f"cat {stream}; exec sleep 120")))
    streams = AgentStreams(specs)
    app = make_app(cluster=(streams, ClusterMonitor(interval_s=0.5)))
    try:
        async with app.run_test(size=WIDE) as pilot:
            await wait_until(pilot, lambda: len(table_rows(app, "ranks-table")) == 2, timeout_s=60)
            assert [(row[0], row[1]) for row in table_rows(app, "ranks-table")] == [("0", "n1"), ("1", "n2")]
            assert "2 nodes merged" in app.status_text().plain
    finally:
        streams.close()
