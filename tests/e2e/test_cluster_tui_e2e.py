"""Pilot tests of a job merged across nodes on screen, replayed from a recording of two nodes' frames (built
with tests/support/cluster_frames.py): the rank table's node column, a header line per node, the lost node said
in red with its time, and the verdict naming the straggler rank and its node; selecting a rank by its node and
PID (both nodes' ranks have one PID) with the GPU, CPU and Stacks panes following its node; and the live path,
the app reading two real subprocesses' streams (each writes a saved agent stream, then stays open) through the
merge.
"""

from __future__ import annotations

import pytest
from support.cluster_frames import straggler_round
from support.pilot import pilot_test, table_rows, wait_until

from probes.frame import to_jsonable
from probes.monitoring.cluster import AgentSpec, AgentStreams, ClusterMonitor
from probes.outputs.recording import json_line, recording_header
from tui.app import JobNote, make_app

WIDE = (160, 48)


@pytest.mark.slow
@pilot_test
async def test_live_the_app_reads_the_agents_streams_and_merges_them(tmp_path):
    specs = []
    for k, node in enumerate(("n1", "n2")):
        stream = tmp_path / f"{node}.jsonl"
        stream.write_text(json_line(recording_header({"node": node})) + "".join(
            json_line(to_jsonable(straggler_round(i)[k])) for i in range(8)))
        # n2's agent answers a few seconds after n1's, as a farther node does: its header line comes later.
        specs.append(AgentSpec(node, ("sh", "-c", f"sleep {3 * k}; cat {stream}; exec sleep 120")))
    streams = AgentStreams(specs)
    app = make_app(cluster=(streams, ClusterMonitor(interval_s=0.5)))
    try:
        async with app.run_test(size=WIDE) as pilot:
            await wait_until(pilot, lambda: len(table_rows(app, "ranks-table")) == 2, timeout_s=60)
            assert [(row[0], row[1]) for row in table_rows(app, "ranks-table")] == [("0", "n1"), ("1", "n2")]
            assert "2 nodes merged" in app.status_text().plain
            # The header has a line per node on screen, not only in its text: n2's line came after n1's.
            await wait_until(pilot, lambda: app.query_one(JobNote).size.height == 2, timeout_s=10)
    finally:
        streams.close()
